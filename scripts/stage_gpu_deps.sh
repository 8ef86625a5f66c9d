#!/usr/bin/env bash
# Stages the Debian build dependencies (fmt, spdlog, nlohmann-json, CLI11, gtest/gmock, PCRE2, utf8proc, cpp-httplib)
# for a GPU machine that has a CUDA toolchain but none of them and no network: the .deb files are downloaded here and
# unpacked (not installed) under DEST/root, which a build there passes as CMAKE_PREFIX_PATH=DEST/root/usr and whose
# lib/x86_64-linux-gnu goes on LD_LIBRARY_PATH. The CMake package files of these packages locate everything
# relative to themselves, and PCRE2, utf8proc, cpp-httplib and OpenSSL's headers are found by find_path /
# find_library under CMAKE_PREFIX_PATH, so the unpacked tree works from any path.
# cpp-httplib is a compiled library that needs libssl.so.3, libcrypto.so.3, libz.so.1 and Brotli at run time: Brotli
# is staged; OpenSSL 3 and zlib are taken from the machine (every Debian or Ubuntu with Python has them), since a
# staged copy on LD_LIBRARY_PATH would stand in for the machine's own for every program run there. libssl-dev is
# staged for its headers only (httplib.h includes them).
#   scripts/stage_gpu_deps.sh [DEST]      (default DEST: .gpu_deps in the repository root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$(realpath -m "${1:-$root/.gpu_deps}")"
packages=(libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
          libbenchmark-dev libbenchmark1debian
          libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev
          libcpp-httplib0.11 libcpp-httplib-dev libssl-dev libbrotli1)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${packages[@]}" >/dev/null)
rm -rf "$dest/root"
mkdir -p "$dest/root"
for deb in "$work"/*.deb; do
    dpkg -x "$deb" "$dest/root"
done
# Documentation and the header-only duplicates are not needed to build; of libssl-dev only the headers are (its
# static archives are 10 MB, and its .so links would point at nothing).
rm -rf "$dest/root/usr/share/doc" "$dest/root/usr/share/man" "$dest/root/usr/share/lintian"
rm -f "$dest"/root/usr/lib/x86_64-linux-gnu/{libssl,libcrypto}.{a,so} \
    "$dest"/root/usr/lib/x86_64-linux-gnu/pkgconfig/{libssl,libcrypto,openssl}.pc
du -sh "$dest/root" | awk '{print "stage_gpu_deps: " $1 " in " $2}'
