#!/usr/bin/env bash
# Sanitizer builds of the suite (docs/sanitizers.md); `scripts/dev.sh test` (the README's test command, and CI) runs
# `all`.
#   scripts/sanitize.sh asan   ASan + UBSan (AFD_SANITIZE=address) over every test, the fuzz targets' short runs
#                              included, in build-asan; the CUDA code is compiled too (when nvcc exists), its tests skip
#                              without a GPU
#   scripts/sanitize.sh tsan   TSan (AFD_SANITIZE=thread) over the runtime, transport and multi-process tests, in
#                              build-tsan (CUDA off)
#   scripts/sanitize.sh all    both, one after the other (the default)
# Each configures, builds with Ninja and runs ctest. nvcc's device and host code is not instrumented. Sanitizer reports
# of the test binaries and of every `afd` process they start go to files (log_path), so that a report in a child whose
# exit the test expects to fail is still seen; the run fails when ctest fails or when any report was written.
# Environment: AFD_SANITIZE_BUILD_ROOT (default: the checkout; the build folders are build-asan and build-tsan in it),
# AFD_BUILD_TYPE (default RelWithDebInfo), AFD_SANITIZE_JOBS (default: nproc), AFD_SANITIZE_CTEST_ARGS (added to ctest,
# e.g. "-R Launch").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_root="${AFD_SANITIZE_BUILD_ROOT:-$root}"
build_type="${AFD_BUILD_TYPE:-RelWithDebInfo}"
jobs="${AFD_SANITIZE_JOBS:-$(nproc)}"
read -r -a extra_ctest_args <<<"${AFD_SANITIZE_CTEST_ARGS:-}"
suppressions="$root/scripts/sanitizers"

# The modules TSan runs over: the runtime (core, http), transport, the ranks and the processes that run them.
tsan_modules="core|http|transport|attention|ffn|serve|cli"
tsan_targets=(afd core_tests http_tests transport_tests attention_tests ffn_tests serve_tests cli_tests)

elapsed() { echo "$(($(date +%s) - $1)) s"; }

# run_one NAME SANITIZE: configure, build, test; prints the time of each phase.
run_one() {
    local name="$1" sanitize="$2"
    local dir="$build_root/build-$name"
    local reports="$dir/sanitizer-reports"
    local start
    start=$(date +%s)
    "$root/scripts/setup.sh"
    # ASan: the whole suite, as the plain build has it (CUDA when nvcc exists, the fuzz targets). TSan: CUDA and the
    # fuzz targets off (the fuzz targets build with their own sanitizers, docs/fuzzing.md).
    local config=(-DAFD_CUDA=AUTO -DAFD_BUILD_FUZZ=ON)
    [ "$name" = tsan ] && config=(-DAFD_CUDA=OFF -DAFD_BUILD_FUZZ=OFF)
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DAFD_SANITIZE="$sanitize" "${config[@]}" \
        -DAFD_BUILD_TESTS=ON -DAFD_BUILD_BENCH=ON >/dev/null
    local targets=()
    [ "$name" = tsan ] && targets=("${tsan_targets[@]}")
    cmake --build "$dir" -- -j"$jobs" "${targets[@]}"
    local built
    built=$(date +%s)
    echo "sanitize: $name built in $(elapsed "$start")"

    rm -rf "$reports"
    mkdir -p "$reports"
    local ctest_args=(--test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900)
    [ "$name" = tsan ] && ctest_args+=(-L "^($tsan_modules)\$")
    local status=0
    if [ "$name" = asan ]; then
        # protect_shadow_gap=0: on a GPU machine the CUDA driver maps memory where ASan's shadow gap would be.
        ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:protect_shadow_gap=0" \
        LSAN_OPTIONS="suppressions=$suppressions/lsan.supp:print_suppressions=0" \
        UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1" \
            ctest "${ctest_args[@]}" "${extra_ctest_args[@]}" || status=$?
    else
        TSAN_OPTIONS="log_path=$reports/tsan:suppressions=$suppressions/tsan.supp:second_deadlock_stack=1:history_size=4" \
            ctest "${ctest_args[@]}" "${extra_ctest_args[@]}" || status=$?
    fi
    echo "sanitize: $name tests ran in $(elapsed "$built") (build and tests: $(elapsed "$start"))"

    local found
    found=$(find "$reports" -type f | sort)
    if [ -n "$found" ]; then
        echo "sanitize: $name: $(echo "$found" | wc -l) sanitizer report file(s):" >&2
        for f in $found; do
            echo "==== $f" >&2
            cat "$f" >&2
        done
        status=1
    fi
    [ "$status" -eq 0 ] && echo "sanitize: $name: no reports, every test passed"
    return "$status"
}

which="${1:-all}"
case "$which" in
    asan) run_one asan address ;;
    tsan) run_one tsan thread ;;
    all)
        status=0
        run_one asan address || status=1
        run_one tsan thread || status=1
        exit "$status"
        ;;
    *)
        echo "usage: scripts/sanitize.sh [asan|tsan|all]" >&2
        exit 2
        ;;
esac
