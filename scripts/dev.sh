#!/usr/bin/env bash
# The two commands of the README, plus the builds they use.
#   scripts/dev.sh run [afd quickstart flags…]   set up, build, run the main job (afd serve, AFD over loopback on CPU)
#   scripts/dev.sh test                      set up, build and run every test under ASan + UBSan, then the runtime,
#                                            transport and multi-process tests under TSan (scripts/sanitize.sh all;
#                                            build-asan, build-tsan): what CI runs
#   scripts/dev.sh test-plain                set up, build and run every test in the plain build (quicker, no sanitizer)
#   scripts/dev.sh build                     set up and build only (the plain build)
# Environment: AFD_BUILD_DIR (the plain build; default build), AFD_BUILD_TYPE (default RelWithDebInfo); for `test`,
# those of scripts/sanitize.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${AFD_BUILD_DIR:-$root/build}"
build_type="${AFD_BUILD_TYPE:-RelWithDebInfo}"

build() {
    "$root/scripts/setup.sh"
    cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DAFD_SANITIZE= >/dev/null
    cmake --build "$build_dir" -- -j"$(nproc)" "$@"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    build)
        build
        ;;
    test)
        exec "$root/scripts/sanitize.sh" all
        ;;
    test-plain)
        build
        ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" --timeout 600
        ;;
    run)
        build afd
        exec "$build_dir/src/afd" quickstart --tokenizer-dir "$root/third_party/tokenizer" "$@"
        ;;
    *)
        echo "usage: scripts/dev.sh run|test|test-plain|build" >&2
        exit 2
        ;;
esac
