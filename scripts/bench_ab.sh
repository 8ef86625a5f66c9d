#!/usr/bin/env bash
# A/B rows of `afd bench moe`, one invocation per variant and round, the variants taken in turn each round, so that
# no variant is always timed first or second on a warm device (timed one after the other, the second of two measured
# up to 10-15 % slower at T >= 4096, whichever it was).
#
#   scripts/bench_ab.sh AFD_BIN ROUNDS "COMMON ARGS" "VARIANT A ARGS" "VARIANT B ARGS" ...
#
# Prints each invocation's table rows prefixed with the round and the variant's arguments ("-" for none).
# Example: scripts/bench_ab.sh .gpu_prebuilt/afd 2 "--tokens 1024,4096 --no-stages --reps 30" "--tiles tall128" \
#          "--tiles wide288"
set -uo pipefail

if [ "$#" -lt 4 ]; then
    echo "usage: $0 AFD_BIN ROUNDS \"COMMON ARGS\" \"VARIANT ARGS\" ..." >&2
    exit 2
fi
bin="$1"
rounds="$2"
common="$3"
shift 3
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
    echo "bench_ab: ROUNDS must be a positive integer, got '$rounds'" >&2
    exit 2
fi
status=0
for ((round = 1; round <= rounds; ++round)); do
    for variant in "$@"; do
        label="${variant:--}"
        # shellcheck disable=SC2086  # the argument strings are word lists on purpose
        if ! out="$(timeout "${AFD_AB_TIMEOUT:-300}" "$bin" bench moe $common $variant 2>&1)"; then
            echo "round $round [$label] failed:"
            echo "$out" | tail -5
            status=1
            continue
        fi
        echo "$out" | awk -v p="r$round [$label]" '$1 ~ /^[0-9]+$/ { print p, $0 }'
    done
done
exit "$status"
