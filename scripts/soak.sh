#!/usr/bin/env bash
# A soak of the OpenAI server (docs/performance.md, "Soak"): `afd serve` (AFD m2n, 1 attention rank + 2 FFN ranks on
# loopback, CPU) under `afd bench serve` at a fixed concurrency for a fixed time. After a warm-up it samples every
# process of the deployment (the server and its FFN ranks): RSS (VmRSS), open fds (/proc/PID/fd) and threads
# (/proc/PID/task); it samples them again when the load ends, both times with no request in flight. It fails on any
# failed request, on RSS growth of any process of 5 % or more, on more fds or threads than after the warm-up, and on a
# server that does not exit 0 on SIGTERM.
#   scripts/soak.sh [--afd BIN] [--duration S] [--warmup S] [--concurrency N] [--input-len N] [--output-len N]
#                   [--prompts-per-run N] [--port P] [--model DIR] [--out DIR]
# The load is a series of `afd bench serve` runs of --prompts-per-run requests each (request rate inf, at most
# --concurrency in flight), run back to back until the time is up; every run's --result-json is kept in --out.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
afd="$root/build/src/afd"
duration=600
warmup=60
concurrency=32
input_len=64
output_len=64
prompts_per_run=512
port=18431
model="$root/tests/data/qwen3-moe-tiny/model"
vocab=380  # the tiny model's vocabulary is 384 ids
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --afd) afd="$2" ;;
        --duration) duration="$2" ;;
        --warmup) warmup="$2" ;;
        --concurrency) concurrency="$2" ;;
        --input-len) input_len="$2" ;;
        --output-len) output_len="$2" ;;
        --prompts-per-run) prompts_per_run="$2" ;;
        --port) port="$2" ;;
        --model) model="$2" ;;
        --out) out="$2" ;;
        *)
            echo "usage: scripts/soak.sh [--afd BIN] [--duration S] [--warmup S] [--concurrency N] [--input-len N]" \
                "[--output-len N] [--prompts-per-run N] [--port P] [--model DIR] [--out DIR]" >&2
            exit 2
            ;;
    esac
    shift 2
done
[ -x "$afd" ] || { echo "soak: no afd binary at $afd (build it, or pass --afd)" >&2; exit 2; }
[ -n "$out" ] || out="$(mktemp -d /tmp/afd-soak-XXXXXX)"
mkdir -p "$out"
echo "soak: output in $out"

server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -TERM "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

"$afd" serve "$model" --port "$port" --additional-config '{"afd":{}}' --run-dir "$out/run" \
    --port-file "$out/port" >"$out/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
    [ -s "$out/port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { echo "soak: afd serve exited; $out/serve.log:" >&2; cat "$out/serve.log" >&2; exit 1; }
    sleep 0.2
done
[ -s "$out/port" ] || { echo "soak: afd serve did not start" >&2; exit 1; }
ffn_pids="$(ps -o pid= --ppid "$server_pid" | tr -d ' ' | tr '\n' ' ')"
pids="$server_pid $ffn_pids"
echo "soak: server $server_pid, FFN ranks: $ffn_pids"

# sample FILE: one line per process: pid, RSS in kB, fds, threads.
sample() {
    : >"$1"
    for pid in $pids; do
        local rss fds threads
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
        fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
        threads=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)
        echo "$pid $rss $fds $threads" >>"$1"
    done
}

run_index=0
# load SECONDS: bench serve runs back to back until SECONDS have passed.
load() {
    local end=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$end" ]; do
        run_index=$((run_index + 1))
        "$afd" bench serve --port "$port" --num-prompts "$prompts_per_run" --max-concurrency "$concurrency" \
            --random-input-len "$input_len" --random-output-len "$output_len" --random-vocab-size "$vocab" \
            --ignore-eos --seed "$run_index" --result-json "$out/run-$run_index.json" >"$out/bench-$run_index.log" 2>&1 ||
            echo "soak: bench serve run $run_index exited $?" | tee -a "$out/bench-errors.log" >&2
    done
}

echo "soak: warm-up ${warmup} s"
load "$warmup"
warm_runs=$run_index
sample "$out/before.txt"
start=$(date +%s)
echo "soak: load ${duration} s at concurrency $concurrency"
load "$duration"
soaked=$(($(date +%s) - start))
sample "$out/after.txt"

kill -TERM "$server_pid"
serve_status=0
wait "$server_pid" || serve_status=$?
server_pid=""

# The figures: requests over the soak's runs (after the warm-up) and over all runs.
python3 - "$out" "$warm_runs" "$run_index" "$soaked" "$serve_status" <<'EOF'
import json, sys, os
out, warm_runs, runs, soaked, serve_status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
completed = failed = missing = 0
tokens = 0
for i in range(1, runs + 1):
    path = os.path.join(out, f"run-{i}.json")
    if not os.path.exists(path):
        missing += 1
        continue
    r = json.load(open(path))
    failed += r["failed"] + r["cancelled"] + r["not_sent"] + r["interrupted"]
    completed += r["completed"]
    if i > warm_runs:
        tokens += r.get("total_output_tokens", 0)
def read(name):
    return {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(os.path.join(out, name))}
before, after = read("before.txt"), read("after.txt")
ok = failed == 0 and missing == 0 and serve_status == 0
print(f"soak: {runs} bench runs ({warm_runs} in the warm-up), {completed} requests completed, {failed} failed (or cancelled, not sent, interrupted), "
      f"{missing} runs without a result; {soaked} s of load after the warm-up, {tokens} output tokens in it "
      f"({tokens / max(soaked, 1):.0f} tok/s); afd serve exited {serve_status} on SIGTERM")
print("| process | RSS before (kB) | RSS after (kB) | growth | fds before/after | threads before/after |")
print("|---|---|---|---|---|---|")
for i, (pid, (rss0, fd0, th0)) in enumerate(before.items()):
    rss1, fd1, th1 = after[pid]
    growth = (rss1 - rss0) / rss0 * 100
    name = "server (attention rank 0)" if i == 0 else f"FFN rank {i - 1}"
    print(f"| {name}, pid {pid} | {rss0} | {rss1} | {growth:+.2f} % | {fd0} / {fd1} | {th0} / {th1} |")
    ok = ok and growth < 5 and fd1 <= fd0 and th1 <= th0
print("soak: PASS" if ok else "soak: FAIL")
sys.exit(0 if ok else 1)
EOF
