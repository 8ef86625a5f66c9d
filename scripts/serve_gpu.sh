#!/usr/bin/env bash
# afd serve on the GPU under afd bench serve, beside the offline engine's decode steps in the same run.
#   scripts/serve_gpu.sh BIN_DIR OUT_DIR
# Dense: the full Qwen3-30B-A3B from random weights (the dense GPU engine), at max concurrency 1, 32, 128 and 256
# (token-id prompts, --ignore-eos so every request generates its full length), then `afd bench generate` at batch
# 1, 32, 128, 256 and context 256: the serving ITL against the engine's own decode step of the same batch.
# AFD (AFD_SERVE_AFD=1): a 4-layer Qwen3-30B-A3B-shaped checkpoint (written here) served by the dense GPU engine and
# by AFD m2n 1A2F with every rank on GPU 0 under an MPS daemon this script starts and stops, same load.
# AFD_SERVE_DENSE=0 skips the dense part. Each run's summary goes to OUT_DIR/serve_*.txt and .json; a table prints last.
set -uo pipefail
bin="$1"
out="$2"
mkdir -p "$out"
vocab=151936
afd="$bin/afd"

# Starts afd serve with the given flags; sets SERVE_PID and SERVE_PORT (empty when it did not come up in 300 s).
start_serve() {
    local name="$1"
    shift
    rm -f "/tmp/afd_serve_$name.port"
    "$afd" serve "$@" --served-model-name "$name" --port 0 --port-file "/tmp/afd_serve_$name.port" \
        >"$out/serve_$name.out" 2>"$out/serve_$name.log" &
    SERVE_PID=$!
    SERVE_PORT=""
    for _ in $(seq 1 600); do
        if [ -s "/tmp/afd_serve_$name.port" ]; then SERVE_PORT=$(cat "/tmp/afd_serve_$name.port"); return; fi
        kill -0 "$SERVE_PID" 2>/dev/null || break
        sleep 0.5
    done
    echo "serve $name did not come up; last lines of its log:"
    tail -20 "$out/serve_$name.log"
}

stop_serve() {
    kill -TERM "$SERVE_PID" 2>/dev/null
    local code=0
    wait "$SERVE_PID" || code=$?
    echo "serve exit $code"
}

load() {  # name concurrency prompts input output
    timeout 180 "$afd" bench serve --port "$SERVE_PORT" --random-vocab-size "$vocab" --ignore-eos --request-rate inf \
        --seed 1 --max-concurrency "$2" --num-prompts "$3" --random-input-len "$4" --random-output-len "$5" \
        --result-json "$out/serve_$1.json" >"$out/serve_$1.txt" 2>&1
    echo "bench serve $1 exit $?"
}

if [ "${AFD_SERVE_DENSE:-1}" = 1 ]; then
start_serve q30 --device cuda --random-weights --preset qwen3-30b-a3b --max-num-seqs 256
if [ -n "$SERVE_PORT" ]; then
    load dense_c1 1 8 128 128
    load dense_c32 32 96 256 128
    load dense_c128 128 256 256 64
    load dense_c256 256 512 128 32
    curl -s "localhost:$SERVE_PORT/metrics" >"$out/serve_q30_metrics.txt" 2>/dev/null || true
fi
stop_serve
timeout 300 "$afd" bench generate --preset qwen3-30b-a3b --batch 1,32,128,256 --context 256 --steps 40 \
    --csv "$out/serve_generate.csv" >"$out/serve_generate.txt" 2>&1
echo "bench generate exit $?"
fi

if [ "${AFD_SERVE_AFD:-0}" = 1 ]; then
    model=/tmp/afd_q30_l4
    [ -f "$model/config.json" ] || timeout 300 "$afd" gen-model --preset qwen3-30b-a3b --layers 4 --out "$model" \
        >"$out/serve_genmodel.log" 2>&1
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/afd_mps CUDA_MPS_LOG_DIRECTORY=/tmp/afd_mps_log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && echo "MPS daemon started"
    start_serve l4dense "$model" --device cuda --max-num-seqs 256
    [ -n "$SERVE_PORT" ] && load l4dense_c32 32 96 256 128 && load l4dense_c1 1 8 128 128
    stop_serve
    start_serve l4afd "$model" --device cuda --ffn-device-ids 0,0 --max-num-seqs 256 --additional-config '{"afd":{}}'
    [ -n "$SERVE_PORT" ] && load l4afd_c32 32 96 256 128 && load l4afd_c1 1 8 128 128
    [ -n "$SERVE_PORT" ] && curl -s "localhost:$SERVE_PORT/metrics" >"$out/serve_l4afd_metrics.txt" 2>/dev/null
    stop_serve
    echo quit | nvidia-cuda-mps-control && echo "MPS daemon stopped"
fi

python3 - "$out" <<'PY'
import csv, glob, json, os, sys
out = sys.argv[1]
steps = {}
try:
    for row in csv.DictReader(open(os.path.join(out, "serve_generate.csv"))):
        if row["kind"] == "decode":
            steps[int(row["batch"])] = float(row["median_ms"])
except Exception as e:
    print(f"(no offline decode steps: {e})")
print(f"{'run':<14}{'ok/fail':>9}{'out tok/s':>11}{'TTFT p50':>10}{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}"
      f"{'TPOT':>8}{'offline step':>14}")
for path in sorted(glob.glob(os.path.join(out, "serve_*_c*.json"))):
    r = json.load(open(path))
    name = os.path.basename(path)[6:-5]
    conc = r.get("max_concurrency") or 0
    step = steps.get(conc)
    print(f"{name:<14}{r['completed']:>5}/{r['failed']:<3}{r['output_throughput']:>11.0f}{r['median_ttft_ms']:>10.1f}"
          f"{r['p99_ttft_ms']:>10.1f}{r['median_itl_ms']:>9.2f}{r['p99_itl_ms']:>9.2f}{r['mean_tpot_ms']:>8.2f}"
          f"{(f'{step:.2f} ms' if step else '-'):>14}")
PY
