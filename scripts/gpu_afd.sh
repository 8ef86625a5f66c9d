#!/usr/bin/env bash
# The GPU AFD check (gpu_check.sh's "afd" phase, or alone): both roles on one GPU over cuda_ipc under an MPS control
# daemon this script starts and stops.
#   scripts/gpu_afd.sh BIN_DIR OUT_DIR
# BIN_DIR holds afd, cli_tests and transport_cuda_tests. It runs the device connector's tests, the launcher's cuda_ipc
# and MPS tests, `afd bench transport`, the greedy ids of a full-width 4-layer Qwen3-30B-A3B shape (random weights)
# against the dense GPU engine for m2n 1A1F / 1A2F / 2A2F and p2p 1A1F in graph, eager and DBO modes, an FFN rank
# killed mid-generation, and full-size decode (batch 1, 64, 256; context 1024) dense against AFD 1A1F and 1A2F.
# Appends "afd ..." lines to OUT_DIR/afd_summary.txt (gpu_check.sh prints it last).
set -uo pipefail
bin="$1"
out="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
afd="$bin/afd"
summary="$out/afd_summary.txt"
full="$root/tests/data/qwen3-30b-a3b"
l4="$out/q30-4layers"
mkdir -p "$l4"
python3 -c "import json,sys;c=json.load(open(sys.argv[1]));c['num_hidden_layers']=4;json.dump(c,open(sys.argv[2],'w'))" \
    "$full/config.json" "$l4/config.json"

timeout 120 "$bin/transport_cuda_tests" --gtest_color=no >"$out/transport_cuda_tests.log" 2>&1
echo "transport_cuda_tests exit $?"
grep -E "^\[  (PASSED|FAILED) " "$out/transport_cuda_tests.log" | sed 's/^/afd transport_cuda_tests /' >>"$summary"
timeout 400 "$bin/cli_tests" --gtest_color=no --gtest_filter='CudaCli.*CudaIpc*:LaunchMpsCuda.*' \
    >"$out/cli_ipc_tests.log" 2>&1
echo "cli_tests (cuda_ipc, MPS) exit $?"
grep -E "^\[  (PASSED|FAILED) " "$out/cli_ipc_tests.log" | sed 's/^/afd cli_tests /' >>"$summary"

export CUDA_MPS_PIPE_DIRECTORY=/tmp/afd-gpu-afd-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/afd-gpu-afd-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "MPS control daemon started"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT

timeout 120 "$afd" bench transport --csv "$out/transport.csv" >"$out/transport.txt" 2>"$out/transport.err"
echo "bench transport exit $?"
cat "$out/transport.txt"

prompts="--prompt-ids 151644,872,198,3838,374,279,6722,315,9625,30 --prompt-ids 1,2,3,4,5 --prompt-ids 777"
ids() { python3 -c "import json,sys;print([r['new_ids'] for r in json.load(open(sys.argv[1]))['results']])" "$1"; }
CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda \
    $prompts --max-tokens 24 --json >"$out/ids_dense.json" 2>"$out/ids_dense.err"
ids "$out/ids_dense.json" >"$out/ids_dense.txt" 2>/dev/null
port=29700
ids_case() {  # name A F m2n(true|false) flags-of-both-roles
    local name=$1 A=$2 F=$3 m2n=$4 flags=$5
    port=$((port + 1))
    local cfg="{\"afd\":{\"connector\":\"cuda_ipc\",\"port\":$port,\"num_attention_ranks\":$A,\"num_ffn_ranks\":$F,\"compute_gate_on_attention\":$m2n}}"
    local ffn_flags=""
    [[ "$flags" == *--enforce-eager* ]] && ffn_flags="--enforce-eager"
    [[ "$flags" == *--dbo* ]] && ffn_flags="$ffn_flags --enable-dbo"
    local ffns="" gens="" rc=0 same=yes
    for r in $(seq 0 $((F - 1))); do
        RANK=$r WORLD_SIZE=$F timeout 150 "$afd" ffn "$l4" --random-weights --device cuda --device-ids 0,0,0,0 \
            $ffn_flags --additional-config "$cfg" >"$out/ids_${name}_ffn$r.log" 2>&1 &
        ffns="$ffns $!"
    done
    for a in $(seq 0 $((A - 1))); do
        timeout 150 "$afd" generate --model "$l4" --random-weights --device cuda --device-ids 0,0,0,0 \
            --gpu-memory-utilization 0.2 $flags $prompts --max-tokens 24 --json --additional-config "$cfg" \
            --attention-rank $a >"$out/ids_${name}_a$a.json" 2>"$out/ids_${name}_a$a.err" &
        gens="$gens $!"
    done
    for g in $gens; do wait "$g" || rc=$?; done
    for p in $ffns; do kill -TERM "$p" 2>/dev/null; done
    for p in $ffns; do wait "$p"; done
    for a in $(seq 0 $((A - 1))); do
        [ "$(ids "$out/ids_${name}_a$a.json" 2>/dev/null)" == "$(cat "$out/ids_dense.txt")" ] || same=no
    done
    echo "afd ids $name: attention exit $rc, ids == dense GPU engine: $same" | tee -a "$summary"
}
for mode in "graph:" "eager:--enforce-eager" "dbo:--dbo"; do
    ids_case "m2n_1a1f_${mode%%:*}" 1 1 true "${mode#*:}"
    ids_case "m2n_1a2f_${mode%%:*}" 1 2 true "${mode#*:}"
    ids_case "m2n_2a2f_${mode%%:*}" 2 2 true "${mode#*:}"
    ids_case "p2p_1a1f_${mode%%:*}" 1 1 false "${mode#*:}"
done

# An FFN rank killed mid-generation: the attention rank ends, naming it.
cfg='{"afd":{"connector":"cuda_ipc","port":29790,"num_attention_ranks":1,"num_ffn_ranks":1}}'
RANK=0 WORLD_SIZE=1 "$afd" ffn "$l4" --random-weights --device cuda --additional-config "$cfg" >"$out/kill_ffn.log" 2>&1 &
ffn=$!
"$afd" generate --model "$l4" --random-weights --device cuda --additional-config "$cfg" --prompt-ids 1,2,3 \
    --ignore-eos --max-tokens 8000 >/dev/null 2>"$out/kill_gen.err" &
gen=$!
for _ in $(seq 1 200); do grep -q "connected to 1 FFN" "$out/kill_gen.err" 2>/dev/null && break; sleep 0.1; done
sleep 2
kill -9 "$ffn"
t0=$(date +%s.%N)
wait "$gen"
code=$?
echo "afd kill ffn: attention exit $code after $(python3 -c "import time;print(round(time.time()-$t0,2))") s:" \
    "$(grep -oE 'ffn rank 0 \(.*\) closed the connection' "$out/kill_gen.err" | head -1)" | tee -a "$summary"

# Full size: dense (outside MPS) against AFD 1A1F and 1A2F.
bench=(bench generate --model "$full" --batch 1,64,256 --context 1024 --prefill-tokens 0 --steps 16)
CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 200 "$afd" "${bench[@]}" >"$out/full_dense.txt" 2>"$out/full_dense.err"
echo "dense exit $?"
tail -4 "$out/full_dense.txt"
for F in 1 2; do
    cfg="{\"afd\":{\"connector\":\"cuda_ipc\",\"port\":2980$F,\"num_attention_ranks\":1,\"num_ffn_ranks\":$F}}"
    ffns=""
    for r in $(seq 0 $((F - 1))); do
        RANK=$r WORLD_SIZE=$F timeout 300 "$afd" ffn "$full" --random-weights --device cuda --device-ids 0,0 \
            --additional-config "$cfg" >"$out/full_1a${F}f_ffn$r.log" 2>&1 &
        ffns="$ffns $!"
    done
    timeout 240 "$afd" "${bench[@]}" --additional-config "$cfg" >"$out/full_1a${F}f.txt" 2>"$out/full_1a${F}f.err"
    echo "AFD 1A${F}F exit $?"
    tail -4 "$out/full_1a${F}f.txt"
    for p in $ffns; do kill -TERM "$p" 2>/dev/null; done
    for p in $ffns; do wait "$p"; done
done
python3 - "$out" >>"$summary" <<'PY'
import sys, re, os
out = sys.argv[1]
def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return {}
    r = {}
    for line in open(path):
        f = line.split()
        if len(f) > 5 and f[0] == "decode":
            r[int(f[1])] = float(f[4])
    return r
dense = rows("full_dense.txt")
for name in ("full_1a1f.txt", "full_1a2f.txt"):
    afd = rows(name)
    for b in sorted(afd):
        if b in dense:
            print(f"afd {name[5:9]} batch {b}: {afd[b]:.3f} ms, dense {dense[b]:.3f} ms, ratio {afd[b] / dense[b]:.3f}")
PY
