#!/usr/bin/env bash
# The GPU AFD check (gpu_check.sh's "afd" phase, or alone): both roles on one GPU over cuda_ipc under an MPS control
# daemon this script starts and stops.
#   scripts/gpu_afd.sh BIN_DIR OUT_DIR
# BIN_DIR holds afd, cli_tests, transport_cuda_tests, kernels_cuda_tests and ffn_tests. Parts (AFD_GPU_AFD_PARTS, default all of
# "tests ids faults perf"):
#   tests   the device connector's and frame kernels' tests, the launcher's cuda_ipc and MPS tests;
#   ids     the greedy ids of a full-width 4-layer Qwen3-30B-A3B shape (random weights) against the dense GPU engine
#           for m2n 1A1F / 1A2F / 2A2F and p2p 1A1F in graph, eager and DBO modes;
#   logits  first-token logits of a 48-prompt batch, dense against m2n 1A1F and 1A2F (how far the FP32 partial sums
#           of two FFN ranks move them);
#   faults  an FFN rank killed mid-generation, an attention rank killed mid-generation, an ordered stop (/stop on the
#           FFN rank after the attention rank's job) with its status file, and no MPS process left at the end;
#   nccl    the ids cases over the nccl connector (m2n 1A1F / 1A2F, p2p 1A1F; graph, eager, DBO), every process on GPU 0
#           with its own NCCL_HOSTID, so that NCCL takes them for hosts of their own and moves the frames over its
#           socket transport (correctness only: its latency is loopback TCP's);
#   torchrun the FFN ranks started as the seed starts them, `python3 -m torch.distributed.run --no-python
#           --nproc-per-node 2 afd ffn …` (m2n 1A2F over cuda_ipc, both ranks on GPU 0 through --device-ids 0,0), the
#           attention rank started first in one run and last in the other: greedy ids against the dense GPU engine,
#           torchrun's variables (TORCHELASTIC_RUN_ID, MASTER_ADDR, GROUP_RANK) present in each FFN rank, and each
#           FFN rank's exit when torchrun is sent SIGTERM;
#   perf    `afd bench transport`, and full-size decode (batch 1, 64, 256; context 1024) dense against AFD 1A1F
#           (graphs, eager, graphs + DBO) and 1A2F (graphs, graphs + DBO); AFD_GPU_AFD_FULL_CASES picks among
#           "1a1f 1a1f_eager 1a1f_dbo 1a2f 1a2f_dbo".
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
parts=" ${AFD_GPU_AFD_PARTS:-tests ids torchrun faults perf} "
part() { [[ "$parts" == *" $1 "* ]]; }
python3 -c "import json,sys;c=json.load(open(sys.argv[1]));c['num_hidden_layers']=4;json.dump(c,open(sys.argv[2],'w'))" \
    "$full/config.json" "$l4/config.json"

gtests() {  # name binary filter timeout
    timeout "$4" "$bin/$2" --gtest_color=no --gtest_filter="$3" >"$out/$1.log" 2>&1
    echo "$1 exit $?"
    grep -E "^\[  (PASSED|FAILED) " "$out/$1.log" | sed "s/^/afd $1 /" >>"$summary"
}
if part tests; then
    gtests transport_cuda_tests transport_cuda_tests '*' 180
    gtests afd_frames_tests kernels_cuda_tests 'AfdFrames*' 60
    gtests ffn_device_tests ffn_tests 'CudaFfnDeviceLanes*:CudaFfnCompute*:CudaRoutedTokens*' 180
    gtests cli_ipc_tests cli_tests 'CudaCli.*CudaIpc*:LaunchMpsCuda.*:Connectors/PoolSessionsCuda.*' 400
fi

export CUDA_MPS_PIPE_DIRECTORY=/tmp/afd-gpu-afd-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/afd-gpu-afd-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && echo "MPS control daemon started"
trap 'echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1' EXIT

if part perf; then
    timeout 120 "$afd" bench transport --csv "$out/transport.csv" >"$out/transport.txt" 2>"$out/transport.err"
    echo "bench transport exit $?"
    cat "$out/transport.txt"
fi

prompts="--prompt-ids 151644,872,198,3838,374,279,6722,315,9625,30 --prompt-ids 1,2,3,4,5 --prompt-ids 777"
dense_json="$out/ids_dense.json"
ids() { python3 -c "import json,sys;print([r['new_ids'] for r in json.load(open(sys.argv[1]))['results']])" "$1"; }
# The dense GPU engine's greedy ids of $prompts (outside MPS), which every AFD case is compared with.
dense_ids() {
    CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda \
        $prompts --max-tokens 24 --json >"$out/ids_dense.json" 2>"$out/ids_dense.err"
    ids "$out/ids_dense.json" >"$out/ids_dense.txt" 2>/dev/null
}
part ids && dense_ids
port=29700
# The connector of ids_case. nccl refuses two ranks on one GPU unless NCCL sees them on different hosts: each
# process gets its own NCCL_HOSTID, and the ranks talk over NCCL's socket transport on loopback.
ids_connector=cuda_ipc
hostid() { [ "$ids_connector" == nccl ] && echo "NCCL_HOSTID=afd-$1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1"; }
ids_case() {  # name A F m2n(true|false) flags-of-both-roles
    local name=$1 A=$2 F=$3 m2n=$4 flags=$5
    port=$((port + 1))
    local cfg="{\"afd\":{\"connector\":\"$ids_connector\",\"port\":$port,\"num_attention_ranks\":$A,\"num_ffn_ranks\":$F,\"compute_gate_on_attention\":$m2n}}"
    local ffn_flags=""
    [[ "$flags" == *--enforce-eager* ]] && ffn_flags="--enforce-eager"
    [[ "$flags" == *--dbo* ]] && ffn_flags="$ffn_flags --enable-dbo"
    local ffns="" gens="" rc=0 same=yes
    for r in $(seq 0 $((F - 1))); do
        RANK=$r WORLD_SIZE=$F env $(hostid ffn$r) timeout 150 "$afd" ffn "$l4" --random-weights --device cuda --device-ids 0,0,0,0 \
            $ffn_flags --additional-config "$cfg" >"$out/ids_${name}_ffn$r.log" 2>&1 &
        ffns="$ffns $!"
    done
    for a in $(seq 0 $((A - 1))); do
        env $(hostid attention$a) timeout 150 "$afd" generate --model "$l4" --random-weights --device cuda \
            --device-ids 0,0,0,0 --gpu-memory-utilization 0.2 $flags $prompts --max-tokens 24 --json --additional-config "$cfg" \
            --attention-rank $a >"$out/ids_${name}_a$a.json" 2>"$out/ids_${name}_a$a.err" &
        gens="$gens $!"
    done
    for g in $gens; do wait "$g" || rc=$?; done
    for p in $ffns; do kill -TERM "$p" 2>/dev/null; done
    for p in $ffns; do wait "$p"; done
    for a in $(seq 0 $((A - 1))); do
        [ "$(ids "$out/ids_${name}_a$a.json" 2>/dev/null)" == "$(cat "$out/ids_dense.txt")" ] || same=no
    done
    local diff=""
    if [ "$same" == no ]; then  # where the first difference is: a late flip (rounding) or garbage from the start
        diff=$(python3 -c "
import json,sys
a=[r['new_ids'] for r in json.load(open(sys.argv[1]))['results']]
d=[r['new_ids'] for r in json.load(open(sys.argv[2]))['results']]
firsts=[next((i for i,(x,y) in enumerate(zip(p,q)) if x!=y), None) for p,q in zip(a,d)]
bad=[f for f in firsts if f is not None]
print(f'({len(bad)} of {len(d)} prompts differ, first differing token at {sorted(bad)[:8]})')" \
            "$out/ids_${name}_a0.json" "$dense_json" 2>&1 | tail -1)
    fi
    echo "afd ids $name: attention exit $rc, ids == dense GPU engine: $same $diff" | tee -a "$summary"
}
if part ids; then
    # 48 prompts: frames of 48 rows (A2F 195 KiB, F2A 384 KiB per peer), past the small-frame sizes of the cases below.
    wide=""
    for i in $(seq 1 48); do wide="$wide --prompt-ids $((i * 7 + 3)),$((i * 13 + 5)),$((i + 100))"; done
    saved_prompts=$prompts
    prompts=$wide
    CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda \
        $prompts --max-tokens 24 --json >"$out/ids_dense_wide.json" 2>"$out/ids_dense_wide.err"
    cp "$out/ids_dense.txt" "$out/ids_dense_narrow.txt"
    ids "$out/ids_dense_wide.json" >"$out/ids_dense.txt" 2>/dev/null
    dense_json="$out/ids_dense_wide.json"
    ids_case "m2n_1a1f_graph_48_prompts" 1 1 true ""
    ids_case "m2n_1a2f_graph_48_prompts" 1 2 true ""
    ids_case "p2p_1a1f_graph_48_prompts" 1 1 false ""
    cp "$out/ids_dense_narrow.txt" "$out/ids_dense.txt"
    prompts=$saved_prompts
    dense_json="$out/ids_dense.json"
fi
for mode in "graph:" "eager:--enforce-eager" "dbo:--dbo"; do
    [ -n "${AFD_GPU_AFD_WIDE_ONLY:-}" ] && break
    part ids || break
    ids_case "m2n_1a1f_${mode%%:*}" 1 1 true "${mode#*:}"
    ids_case "m2n_1a2f_${mode%%:*}" 1 2 true "${mode#*:}"
    ids_case "m2n_2a2f_${mode%%:*}" 2 2 true "${mode#*:}"
    ids_case "p2p_1a1f_${mode%%:*}" 1 1 false "${mode#*:}"
done

if part torchrun; then
    [ -s "$out/ids_dense.txt" ] || dense_ids
    for order in attention_first attention_last; do
        port=$((port + 1))
        cfg="{\"afd\":{\"connector\":\"cuda_ipc\",\"port\":$port,\"num_attention_ranks\":1,\"num_ffn_ranks\":2}}"
        logs="$out/torchrun_$order"
        rm -rf "$logs" && mkdir -p "$logs"
        start_attention() {
            timeout 150 "$afd" generate --model "$l4" --random-weights --device cuda --gpu-memory-utilization 0.2 \
                $prompts --max-tokens 24 --json --additional-config "$cfg" >"$logs/attention.json" \
                2>"$logs/attention.err" &
            gen=$!
        }
        [ "$order" == attention_first ] && start_attention && sleep 3
        # torchrun gives each worker RANK, WORLD_SIZE, LOCAL_RANK and its own variables; --redirects 3 writes each
        # worker's stdout and stderr under --log-dir.
        timeout 200 python3 -m torch.distributed.run --no-python --nproc-per-node 2 --master-port $((port + 500)) \
            --log-dir "$logs/torchrun" --redirects 3 "$afd" ffn "$l4" --random-weights --device cuda \
            --device-ids 0,0 --additional-config "$cfg" >"$logs/torchrun.out" 2>&1 &
        trpid=$!
        sleep 2
        [ "$order" == attention_last ] && start_attention
        wait "$gen"
        rc=$?
        envs=""
        for pid in $(pgrep -f "^$afd ffn $l4"); do
            vars=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -cE "^(TORCHELASTIC_RUN_ID|MASTER_ADDR|GROUP_RANK)=")
            rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^RANK=//p')
            envs="$envs rank$rank:$vars/3"
        done
        kill -TERM "$trpid" 2>/dev/null
        wait "$trpid"
        trc=$?
        same=no
        [ "$(ids "$logs/attention.json" 2>/dev/null)" == "$(cat "$out/ids_dense.txt")" ] && same=yes
        stopped=$(grep -rl "exit 0 (stopped)" "$logs/torchrun" 2>/dev/null | wc -l)
        echo "afd torchrun $order: attention exit $rc, ids == dense GPU engine: $same, torchrun variables in the FFN" \
            "ranks:${envs:- none found}, torchrun exit $trc after SIGTERM, worker logs ending \"exit 0 (stopped)\": $stopped of 2" |
            tee -a "$summary"
    done
fi

if part nccl; then
    [ -s "$out/ids_dense.txt" ] || dense_ids
    ids_connector=nccl
    for mode in "graph:" "eager:--enforce-eager" "dbo:--dbo"; do
        ids_case "nccl_m2n_1a1f_${mode%%:*}" 1 1 true "${mode#*:}"
        ids_case "nccl_m2n_1a2f_${mode%%:*}" 1 2 true "${mode#*:}"
        ids_case "nccl_p2p_1a1f_${mode%%:*}" 1 1 false "${mode#*:}"
    done
    ids_connector=cuda_ipc
fi

if part logits; then
    # The 48-prompt case's first-token logits, dense against m2n 1A1F and 1A2F: how far the two FFN ranks' FP32
    # partial sums move them, against the top-2 gap where a greedy token flips.
    wide=""
    for i in $(seq 1 48); do wide="$wide --prompt-ids $((i * 7 + 3)),$((i * 13 + 5)),$((i + 100))"; done
    CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda \
        $wide --max-tokens 1 --json --prompt-logits >"$out/logits_dense.json" 2>"$out/logits_dense.err"
    for F in 1 2; do
        cfg="{\"afd\":{\"connector\":\"cuda_ipc\",\"port\":2990$F,\"num_attention_ranks\":1,\"num_ffn_ranks\":$F}}"
        ffns=""
        for r in $(seq 0 $((F - 1))); do
            RANK=$r WORLD_SIZE=$F env $(hostid ffn$r) timeout 150 "$afd" ffn "$l4" --random-weights --device cuda --device-ids 0,0 \
                --additional-config "$cfg" >"$out/logits_ffn$F$r.log" 2>&1 &
            ffns="$ffns $!"
        done
        timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda --gpu-memory-utilization 0.3 $wide \
            --max-tokens 1 --json --prompt-logits --additional-config "$cfg" >"$out/logits_1a${F}f.json" \
            2>"$out/logits_1a${F}f.err"
        for p in $ffns; do kill -TERM "$p" 2>/dev/null; done
        for p in $ffns; do wait "$p"; done
    done
    python3 - "$out" <<'PY' | tee -a "$summary"
import json, sys
out = sys.argv[1]
dense = json.load(open(f"{out}/logits_dense.json"))["results"]
for F in (1, 2):
    try:
        afd = json.load(open(f"{out}/logits_1a{F}f.json"))["results"]
    except Exception as e:
        print(f"afd logits 1A{F}F: no results ({e})")
        continue
    worst, worst_rel, flips, gaps = 0.0, 0.0, 0, []
    for d, a in zip(dense, afd):
        ld, la = d["prompt_last_logits"], a["prompt_last_logits"]
        diff = max(abs(x - y) for x, y in zip(ld, la))
        top = sorted(ld, reverse=True)
        worst = max(worst, diff)
        worst_rel = max(worst_rel, diff / max(abs(top[0]), 1e-30))
        if d["new_ids"] != a["new_ids"]:
            flips += 1
            gaps.append(round(top[0] - top[1], 5))
    print(f"afd logits 1A{F}F: max |logit diff| {worst:.5f} (relative {worst_rel:.1e}), first tokens that differ "
          f"{flips} of {len(dense)}, dense top-2 gaps there {gaps[:8]}")
PY
fi

elapsed() { python3 -c "import time;print(round(time.time()-$1,2))"; }
# waitFor PID SECONDS: until the process ends, then SIGKILL if it still runs (the caller's wait then returns).
waitFor() {
    for _ in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    echo "pid $1 still ran after $2 s: killed" | tee -a "$summary"
    kill -9 "$1" 2>/dev/null
}
if part faults; then
    # An FFN rank killed mid-generation: the attention rank ends, naming it.
    cfg='{"afd":{"connector":"cuda_ipc","port":29790,"num_attention_ranks":1,"num_ffn_ranks":1}}'
    RANK=0 WORLD_SIZE=1 "$afd" ffn "$l4" --random-weights --device cuda --additional-config "$cfg" \
        >"$out/kill_ffn.log" 2>&1 &
    ffn=$!
    "$afd" generate --model "$l4" --random-weights --device cuda --additional-config "$cfg" \
        --prompt-ids 1,2,3 --ignore-eos --max-tokens 8000 >/dev/null 2>"$out/kill_gen.err" &
    gen=$!
    for _ in $(seq 1 300); do grep -q "connected to 1 FFN" "$out/kill_gen.err" 2>/dev/null && break; sleep 0.1; done
    sleep 1
    kill -9 "$ffn"
    t0=$(date +%s.%N)
    waitFor "$gen" 30
    wait "$gen"
    code=$?
    echo "afd kill ffn: attention exit $code after $(elapsed "$t0") s:" \
        "$(grep -oE 'ffn rank 0 \(.*\) closed the connection' "$out/kill_gen.err" | head -1)" | tee -a "$summary"

    # An attention rank killed mid-generation: the FFN rank (serving one session) ends with peer_lost.
    cfg='{"afd":{"connector":"cuda_ipc","port":29791,"num_attention_ranks":1,"num_ffn_ranks":1}}'
    RANK=0 WORLD_SIZE=1 "$afd" ffn "$l4" --random-weights --device cuda --additional-config "$cfg" \
        --serve-sessions once --status-file "$out/kill_attn_status.json" >"$out/kill_attn_ffn.log" 2>&1 &
    ffn=$!
    "$afd" generate --model "$l4" --random-weights --device cuda --additional-config "$cfg" \
        --prompt-ids 1,2,3 --ignore-eos --max-tokens 8000 >/dev/null 2>"$out/kill_attn_gen.err" &
    gen=$!
    for _ in $(seq 1 300); do grep -q "connected to 1 FFN" "$out/kill_attn_gen.err" 2>/dev/null && break; sleep 0.1; done
    sleep 1
    kill -9 "$gen"
    t0=$(date +%s.%N)
    waitFor "$ffn" 30
    seen=$(elapsed "$t0")
    kill -0 "$ffn" 2>/dev/null && kill -TERM "$ffn"
    wait "$ffn"
    code=$?
    echo "afd kill attention: FFN exit $code after $seen s;" \
        "$(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print('status', d.get('exit_reason'), 'released', d.get('resources_released'), '|', d.get('error') or '', '|', d.get('released'))" \
            "$out/kill_attn_status.json" 2>&1)" | tee -a "$summary"

    # Ordered stop: the attention rank's job ends (exit 0), then POST /stop on the FFN rank (exit 0, status file).
    cfg='{"afd":{"connector":"cuda_ipc","port":29792,"num_attention_ranks":1,"num_ffn_ranks":1}}'
    RANK=0 WORLD_SIZE=1 "$afd" ffn "$l4" --random-weights --device cuda --additional-config "$cfg" \
        --status-file "$out/stop_status.json" --admin-port-file "$out/stop_admin_port" >"$out/stop_ffn.log" 2>&1 &
    ffn=$!
    timeout 120 "$afd" generate --model "$l4" --random-weights --device cuda --additional-config "$cfg" \
        --prompt-ids 1,2,3 --max-tokens 16 >/dev/null 2>"$out/stop_gen.err"
    gen_code=$?
    admin=$(cat "$out/stop_admin_port" 2>/dev/null)
    t0=$(date +%s.%N)
    stop_reply=$(python3 -c "import urllib.request,sys;print(urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:'+sys.argv[1]+'/stop',method='POST'),timeout=10).status)" "$admin" 2>&1 | tail -1)
    waitFor "$ffn" 30
    wait "$ffn"
    code=$?
    echo "afd ordered stop: attention exit $gen_code, POST /stop $stop_reply, FFN exit $code after $(elapsed "$t0") s;" \
        "$(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print('status', d.get('exit_reason'), 'released', d.get('resources_released'), '|', d.get('released'))" \
            "$out/stop_status.json" 2>&1)" | tee -a "$summary"
fi

if part perf; then
    # Full size: dense (outside MPS) against AFD 1A1F and 1A2F, graphs, eager and graphs + DBO.
    bench=(bench generate --model "$full" --batch 1,64,256 --context 1024 --prefill-tokens 0 --steps 16)
    CUDA_MPS_PIPE_DIRECTORY=/nonexistent timeout 200 "$afd" "${bench[@]}" >"$out/full_dense.txt" 2>"$out/full_dense.err"
    echo "dense exit $?"
    tail -4 "$out/full_dense.txt"
    port=29800
    full_case() {  # name F attention-flags ffn-flags
        local name=$1 F=$2 aflags=$3 fflags=$4 ffns=""
        port=$((port + 1))
        local cfg="{\"afd\":{\"connector\":\"cuda_ipc\",\"port\":$port,\"num_attention_ranks\":1,\"num_ffn_ranks\":$F}}"
        for r in $(seq 0 $((F - 1))); do
            RANK=$r WORLD_SIZE=$F timeout 300 "$afd" ffn "$full" --random-weights --device cuda --device-ids 0,0 \
                $fflags --additional-config "$cfg" >"$out/full_${name}_ffn$r.log" 2>&1 &
            ffns="$ffns $!"
        done
        timeout 240 "$afd" "${bench[@]}" $aflags --additional-config "$cfg" >"$out/full_$name.txt" 2>"$out/full_$name.err"
        echo "AFD $name exit $?"
        tail -3 "$out/full_$name.txt"
        for p in $ffns; do kill -TERM "$p" 2>/dev/null; done
        for p in $ffns; do wait "$p"; done
    }
    cases=" ${AFD_GPU_AFD_FULL_CASES:-1a1f 1a1f_eager 1a1f_dbo 1a2f 1a2f_dbo} "
    [[ "$cases" == *" 1a1f "* ]] && full_case 1a1f 1 "" ""
    [[ "$cases" == *" 1a1f_eager "* ]] && full_case 1a1f_eager 1 --enforce-eager --enforce-eager
    [[ "$cases" == *" 1a1f_dbo "* ]] && full_case 1a1f_dbo 1 --dbo --enable-dbo
    [[ "$cases" == *" 1a2f "* ]] && full_case 1a2f 2 "" ""
    [[ "$cases" == *" 1a2f_dbo "* ]] && full_case 1a2f_dbo 2 --dbo --enable-dbo
    python3 - "$out" >>"$summary" <<'PY'
import sys, os
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
for name in ("1a1f", "1a1f_eager", "1a1f_dbo", "1a2f", "1a2f_dbo"):
    afd = rows(f"full_{name}.txt")
    for b in sorted(afd):
        if b in dense:
            print(f"afd {name} batch {b}: {afd[b]:.3f} ms, dense {dense[b]:.3f} ms, ratio {afd[b] / dense[b]:.3f}")
PY
fi
pkill -9 -f "$afd " 2>/dev/null  # any rank a failed case left (none when every case passed)
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
trap - EXIT
sleep 2
left=$(pgrep -l nvidia-cuda-mps 2>/dev/null | tr '\n' ' ')
echo "afd MPS after the run: ${left:-no MPS process left}" | tee -a "$summary"
