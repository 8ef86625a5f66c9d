#!/usr/bin/env bash
# The GPU check, run on a machine with a Hopper GPU: build the CUDA backend with the benchmark lab (`afd bench`), run
# the GPU tests, run `afd bench moe` and the two peers on the same routing, print a short table last.
#   scripts/gpu_check.sh
# Environment:
#   OUT            folder for logs and CSVs (default: gpu_out in the repository root)
#   AFD_GPU_DEPS   unpacked build dependencies from scripts/stage_gpu_deps.sh (default: .gpu_deps/root)
#   AFD_PREBUILT   folder holding `afd` and `kernels_cuda_tests` built elsewhere for this machine; used when they
#                  start here, otherwise the script builds (build-gpu/)
#   AFD_PHASES     which phases to run, default "tests bench sweep peers router ffn hf" ("router": `afd bench
#                  router` and its torch peer, bench/peers/torch_router.py); "stream" adds `afd bench stream` (how
#                  fast 8-132 SMs read DRAM by TMA or loads, what L2 bytes read with or beside the stages cost it, with
#                  and without the layer's L2 policies, and a stage in one run or four); "ncu" adds hardware counters
#                  of the grouped GEMMs at T = AFD_NCU_TOKENS (default 1024) with AFD_NCU_ROUTING (default uniform) to
#                  sass.txt (Nsight Compute, clocks left alone; the warp-state section includes the stalls on
#                  instruction fetch, "No Instruction"), and the DRAM bytes of two whole layers to dram.txt (graph
#                  replays, caches not flushed). "ffn": the GPU FFN rank (its tests, then `afd launch --ffn-device
#                  cuda` on the HF fixture and on a 2-layer Qwen3-30B-A3B-shaped model); "hf": scripts/hf_crosscheck.py
#                  (engine vs transformers). "l2" adds the L2 counters of the grouped GEMMs (read and write lookups hit
#                  and missed, fills from DRAM, DRAM bytes, the stalls of the fabric between the L2 partitions) at T =
#                  AFD_NCU_TOKENS, uniform and zipf, to l2.txt. "power" samples the SM clock, board power and throttle
#                  reasons (nvidia-smi every 25 ms, scripts/smi_summary.py) while afd replays T = AFD_POWER_TOKENS
#                  (default 1024) for 6000 replays, uniform and zipf (power.txt)
#                  "engine": the dense GPU engine and the GPU attention role (attention_cuda_tests, the CLI's GPU
#                  tests, a full-width 4-layer generated checkpoint on the dense CPU reference, the dense GPU engine and
#                  GPU AFD over tcp m2n 1A2F / p2p 1A1F, and the full 48-layer Qwen3-30B-A3B from random weights);
#                  "attention": attention_bench beside PyTorch SDPA (bench/peers/torch_sdpa.py); "generate": `afd bench
#                  generate` and its PyTorch peer (bench/peers/torch_qwen3_moe.py); "ab": `afd bench moe` of the
#                  build against AFD_AB_OLD (an afd built from an earlier revision), in turn, two rounds;
#                  "tokenizer": tokenizer_bench beside HF tokenizers (bench/peers/hf_tokenize.py; needs the tokenizer
#                  in third_party/tokenizer and AFD_EXTRA_TARGETS=tokenizer_bench); "serve": `afd serve` under
#                  `afd bench serve` (scripts/serve_gpu.sh); "gemm": `afd bench gemm` (every cuBLASLt algorithm of
#                  the attention side's GEMMs at decode row counts); "afd": both roles on one GPU over cuda_ipc under MPS
#                  (scripts/gpu_afd.sh: the device connector's tests, `afd bench transport`, greedy ids against the
#                  dense GPU engine in graph / eager / DBO modes, a killed FFN rank, full-size decode dense vs AFD)
#   AFD_REPS       timed replays per point (default 100; the peers use half)
#   AFD_WARMUP_MS  device time of warm-up before each timed series, ours and the peers' (default: the benchmarks' own,
#                  300 ms, the steady state under the power cap; 0: burst clocks)
#   AFD_BUNDLE     1: at the end, pack everything under OUT (earlier runs' files too) except gpu_check.log into
#                  OUT/bundle.tgz and remove the loose files (for a lender that returns only a few files per call)
# Every phase has a time limit so that the table still prints when one phase hangs or fails.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu_out}"
deps="${AFD_GPU_DEPS:-$root/.gpu_deps/root}"
phases="${AFD_PHASES:-tests bench sweep peers router ffn hf}"
reps="${AFD_REPS:-100}"
warm_args=()
if [ -n "${AFD_WARMUP_MS:-}" ]; then warm_args=(--warmup-ms "$AFD_WARMUP_MS"); fi
mkdir -p "$out"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
has_phase() { [[ " $phases " == *" $1 "* ]]; }
stamp() { echo "== $(date +%T) $*"; }

bin=""
if [ -n "${AFD_PREBUILT:-}" ] && "$AFD_PREBUILT/afd" --version >/dev/null 2>&1; then
    bin="$AFD_PREBUILT"
    stamp "using prebuilt binaries from $bin" | tee "$out/build.log"
else
    stamp "building" | tee "$out/build.log"
    nccl_root="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)"
    build="$root/build-gpu"
    {
        cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps/usr" -DAFD_CUDA=ON \
            -DAFD_BUILD_FUZZ=OFF -DAFD_BUILD_BENCH=ON ${nccl_root:+-DAFD_NCCL_ROOT=$nccl_root} &&
            timeout 480 ninja -C "$build" kernels_cuda_tests ffn_tests attention_cuda_tests cli_tests lab_tests afd \
                attention_bench transport_cuda_tests ${AFD_EXTRA_TARGETS:-}
    } >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "gpu_check: build failed"; exit 1; }
    grep -E "registers|spill|C75" "$out/build.log" | sort | uniq -c | head -40
    mkdir -p "$build/bin" && cp "$build/src/afd" "$build/tests/kernels_cuda_tests" "$build/tests/ffn_tests" \
        "$build/tests/attention_cuda_tests" "$build/tests/cli_tests" "$build/tests/lab_tests" \
        "$build/tests/transport_cuda_tests" "$build/bench/attention/attention_bench" "$build/bin/"
    [ -x "$build/bench/tokenizer_bench" ] && cp "$build/bench/tokenizer_bench" "$build/bin/"
    bin="$build/bin"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >>"$out/build.log" 2>&1

# Which matrix instructions the kernels run, and any local-memory traffic (spills).
if command -v cuobjdump >/dev/null; then
    cuobjdump -sass "$bin/afd" 2>/dev/null | awk '
        /Function :/ { fn = $3 }
        /HGMMA/ { h[fn]++ } /HMMA/ { m[fn]++ } /LDL|STL/ { l[fn]++ }
        END { for (f in h) printf "HGMMA %5d HMMA %4d LDL/STL %4d %s\n", h[f], m[f], l[f], f;
              for (f in m) if (!(f in h)) printf "HGMMA %5d HMMA %4d LDL/STL %4d %s\n", 0, m[f], l[f], f }' \
        | sort -k7 >"$out/sass.txt"
    stamp "sass: $(wc -l <"$out/sass.txt") kernels with matrix instructions"
fi

if has_phase tests; then
    stamp "kernels_cuda_tests"
    timeout "${AFD_T_TESTS:-240}" "$bin/kernels_cuda_tests" --gtest_color=no >"$out/tests.log" 2>&1
    echo "kernels_cuda_tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|rel|Expected" "$out/tests.log" | head -40
fi

routing_dir=/tmp/afd_routing
afd_summary="$out/afd_summary.txt"
: >"$afd_summary"
mkdir -p "$routing_dir"
if has_phase bench; then
    stamp "afd bench moe"
    timeout "${AFD_T_BENCH:-240}" "$bin/afd" bench moe --reps "$reps" "${warm_args[@]}" --csv "$out/ours.csv" \
        --dump-routing "$routing_dir" >"$out/bench.log" 2>&1
    echo "bench exit $?"
    cat "$out/bench.log"
fi
if has_phase sweep; then
    stamp "tile sweep"
    timeout "${AFD_T_SWEEP:-150}" "$bin/afd" bench moe --no-stages --reps 30 --tokens 1,8,64,256,1024 \
        --tiles tiny8,small16,small64,small128,wide128,tall128,tall128g >>"$out/bench.log" 2>&1
    timeout "${AFD_T_SWEEP2:-90}" "$bin/afd" bench moe --no-stages --reps 15 --tokens 4096,16384 \
        --tiles wide128,wide256,wide288,tall128 >>"$out/bench.log" 2>&1
    echo "sweep exit $?"
fi
if has_phase power && command -v nvidia-smi >/dev/null; then
    stamp "power: SM clock and board power while the layer runs"
    smi_fields=timestamp,clocks.sm,clocks.mem,power.draw,clocks_event_reasons.sw_power_cap
    smi_fields+=,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,temperature.gpu
    power_tokens="${AFD_POWER_TOKENS:-1024}"
    {
        for b in "$bin/afd"; do
            for routing in uniform zipf; do
                label="$(basename "$b") T=$power_tokens $routing"
                samples="$out/smi-$(basename "$b")-$routing.csv"
                nvidia-smi --query-gpu="$smi_fields" --format=csv,noheader,nounits -lms 25 >"$samples" 2>&1 &
                sampler=$!
                timeout 120 "$b" bench moe --no-stages --reps 6000 --tokens "$power_tokens" --routing "$routing" \
                    2>&1 | awk -v p="$label" '$1 ~ /^[0-9]+$/ { print p, $0 }'
                kill "$sampler" 2>/dev/null
                wait "$sampler" 2>/dev/null
                python3 "$root/scripts/smi_summary.py" "$label" "$samples"
            done
        done
    } >"$out/power.txt"
    echo "power exit $?"
    cat "$out/power.txt"
fi
if has_phase l2 && command -v ncu >/dev/null; then
    stamp "l2: L2 counters of the grouped GEMMs"
    l2_metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct"
    for m in op_read_lookup_hit op_read_lookup_miss op_write_lookup_hit op_write_lookup_miss; do
        l2_metrics+=",lts__t_sectors_aperture_device_$m.sum"
    done
    l2_metrics+=",lts__d_sectors_fill_device.sum,lts__ltcfabric2lts_cycles_stalled.sum"
    for b in "$bin/afd"; do
        for routing in uniform zipf; do
            echo "== $(basename "$b") T=${AFD_NCU_TOKENS:-1024} $routing"
            # the gate-up and down kernels of one layer after the warm-up's launches
            timeout 150 ncu --clock-control none --graph-profiling node --kernel-name regex:groupedGemm \
                --launch-skip 40 --launch-count 2 --metrics "$l2_metrics" "$b" bench moe \
                --tokens "${AFD_NCU_TOKENS:-1024}" --routing "$routing" --reps 10 --no-stages 2>&1 |
                grep -E "groupedGemm|^ +[a-z_0-9]+__|ERR"
        done
    done >"$out/l2.txt"
    echo "l2 exit $?"
    cat "$out/l2.txt"
fi
if has_phase peers; then
    peer_reps=$((reps / 2))
    for peer in grouped_mm_moe triton_fused_moe; do
        stamp "peer $peer"
        (cd "$root/bench/peers" &&
            timeout "${AFD_T_PEER:-200}" python3 "$peer.py" --routing-dir "$routing_dir" --reps "$peer_reps" "${warm_args[@]}" \
                --csv "$out/${peer%%_moe}.csv") >>"$out/peers.log" 2>&1
        echo "$peer exit $?"
    done
    grep -vE "^  " "$out/peers.log" | tail -40
fi
if has_phase router; then
    stamp "afd bench router and its torch peer"
    timeout 120 "$bin/afd" bench router "${warm_args[@]}" --csv "$out/router.csv" >"$out/router.log" 2>&1
    echo "bench router exit $?"
    (cd "$root/bench/peers" && timeout 200 python3 torch_router.py "${warm_args[@]}" --csv "$out/torch_router.csv") \
        >>"$out/router.log" 2>&1
    echo "torch_router exit $?"
    python3 - "$out/router.csv" "$out/torch_router.csv" >>"$afd_summary" <<'PY'
import csv, sys
try:
    ours = {r["tokens"]: r for r in csv.DictReader(open(sys.argv[1]))}
    peer = {r["tokens"]: r for r in csv.DictReader(open(sys.argv[2]))}
    print("router (E 128, H 2048, top-8): T, ours us, torch us, torch/ours, % of floor")
    for t, r in ours.items():
        p = float(peer[t]["median_us"]) if t in peer else float("nan")
        us = float(r["median_us"])
        print(f"  {t:>6} {us:8.2f} {p:8.2f} {p / us:6.2f}x {float(r['pct_of_floor']):6.1f}")
except Exception as e:
    print(f"router: no result ({e})")
PY
fi
if has_phase stream; then
    stamp "afd bench stream"
    timeout 120 "$bin/afd" bench stream --sms 8,33,66,99,132 --stages 4 "${warm_args[@]}" --csv "$out/stream.csv" \
        >"$out/stream.log" 2>&1
    echo "bench stream (SM counts) exit $?"
    timeout 120 "$bin/afd" bench stream --modes tma,cp128,tma+lsu-l2,lsu+tma-l2 --sms 132 --stages 4 \
        --stage-l2-kib 8,16 --policies none,layer "${warm_args[@]}" --csv "$out/stream_l2.csv" >>"$out/stream.log" 2>&1
    echo "bench stream (L2 bytes beside the weights, without and with the layer's L2 policies) exit $?"
    timeout 120 "$bin/afd" bench stream --modes tma --sms 66,132 --stages 4 --pieces 1,4 "${warm_args[@]}" \
        --csv "$out/stream_pieces.csv" >>"$out/stream.log" 2>&1
    echo "bench stream (a stage in one run or in four) exit $?"
    grep -E "^ *(tma|lsu|cp|ld)" "$out/stream.log" | tee -a "$afd_summary"
fi
if has_phase ncu && command -v ncu >/dev/null; then
    stamp "ncu"
    timeout 120 ncu --clock-control none --graph-profiling node --kernel-name regex:groupedGemm \
        --launch-skip 40 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats "$bin/afd" bench moe --tokens "${AFD_NCU_TOKENS:-1024}" \
        --routing "${AFD_NCU_ROUTING:-uniform}" --reps 10 --no-stages >>"$out/sass.txt" 2>&1
    echo "ncu exit $?"
    grep -E "groupedGemm|Throughput|Duration|DRAM|L2 Cache|Stall|No Instruction" "$out/sass.txt" | tail -40
    # DRAM bytes of whole layers in context (graph replays, caches left as the previous layer left them): what the
    # layer moves beside its weights (scratch rows written back and read again). The bench launches about 70 kernels
    # (copy, cuBLAS and fill kernels, one eager layer per weight set) before its 50 graph replays (10 warm-up + 40), so
    # skipping 90 launches profiles two timed replays.
    timeout 120 ncu --graph-profiling graph --cache-control none --clock-control none \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --launch-skip 90 --launch-count 2 \
        "$bin/afd" bench moe --tokens "${AFD_NCU_TOKENS:-1024}" --routing "${AFD_NCU_ROUTING:-uniform}" --reps 40 \
        --no-stages >"$out/dram.txt" 2>&1
    echo "ncu graphs exit $?"
    grep -E "dram__bytes" "$out/dram.txt"
fi
if has_phase ffn; then
    stamp "ffn_tests (GPU FFN compute vs CPU)"
    timeout 180 "$bin/ffn_tests" --gtest_color=no --gtest_filter='CudaFfnCompute*:DeviceMapping*' >"$out/ffn_tests.log" 2>&1
    echo "ffn_tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected" "$out/ffn_tests.log" | head -20
    grep -E "^\[  (PASSED|FAILED) " "$out/ffn_tests.log" | sed 's/^/ffn_tests /' >>"$afd_summary"
    fixture="$root/tests/data/qwen3-moe-tiny/model"
    for mode in m2n p2p; do
        if [ "$mode" = m2n ]; then cfg='{"afd":{"num_attention_ranks":1,"num_ffn_ranks":2}}'; ids=0,0
        else cfg='{"afd":{"num_attention_ranks":2,"num_ffn_ranks":1,"compute_gate_on_attention":false}}'; ids=0; fi
        stamp "afd launch $mode, FFN ranks on the GPU, HF fixture"
        timeout 120 "$bin/afd" launch --model "$fixture" --ffn-device cuda --ffn-device-ids "$ids" --max-tokens 12 --json \
            --prompt-ids 3,17,99,250,7,42,311,5 --prompt-ids 11,12,13 --additional-config "$cfg" --run-dir "$out/launch_$mode" \
            >"$out/launch_$mode.json" 2>"$out/launch_$mode.log"
        echo "launch $mode exit $?"
        python3 - "$out/launch_$mode.json" "$mode" >>"$afd_summary" <<'PY'
import json, sys
want = [153, 379, 188, 113, 374, 186, 112, 186, 112, 358, 113, 250]
try:
    out = json.load(open(sys.argv[1]))
    got = out["results"][0]["new_ids"]
    print(f"fixture {sys.argv[2]} GPU FFN: ids {'==' if got == want else '!='} transformers, "
          f"matches dense CPU reference: {out['afd']['matches_dense_reference']}, clean: {out['afd']['clean_shutdown']}")
except Exception as e:
    print(f"fixture {sys.argv[2]} GPU FFN: no result ({e})")
PY
    done
    stamp "Qwen3-30B-A3B shapes, 2 layers, 2 GPU FFN ranks (m2n)"
    timeout 120 "$bin/afd" gen-model --preset qwen3-30b-a3b --layers 2 --out /tmp/afd_q30 >"$out/q30.log" 2>&1
    timeout 240 "$bin/afd" launch --model /tmp/afd_q30 --ffn-device cuda --ffn-device-ids 0,0 --max-tokens 8 --json \
        --prompt-ids 1,2,3,4,5,6,7,8 --prompt-ids 9,10,11 --run-dir "$out/launch_q30" >"$out/launch_q30.json" 2>>"$out/q30.log"
    echo "launch q30 exit $?"
    python3 - "$out/launch_q30.json" >>"$afd_summary" <<'PY'
import json, sys
try:
    out = json.load(open(sys.argv[1]))
    layers = [f"L{l['layer']}: ffn {1e3*l['ffn_compute_seconds']:.1f} ms, transfer {1e3*l['attention_transfer_seconds']:.1f} ms"
              for l in out["afd"]["layers"]]
    print(f"qwen3-30b-a3b 2 layers GPU FFN m2n 1A2F: matches dense CPU reference: "
          f"{out['afd']['matches_dense_reference']}, clean: {out['afd']['clean_shutdown']}; " + "; ".join(layers))
except Exception as e:
    print(f"qwen3-30b-a3b GPU FFN: no result ({e})")
PY
fi
if has_phase hf; then
    stamp "engine vs transformers (scripts/hf_crosscheck.py)"
    timeout 400 python3 "$root/scripts/hf_crosscheck.py" --afd "$bin/afd" --out /tmp/afd_hf >"$out/hf.log" 2>&1
    echo "hf_crosscheck exit $?"
    tail -14 "$out/hf.log" | tee -a "$afd_summary"
    stamp "the GPU engine vs transformers (scripts/hf_crosscheck.py --device cuda)"
    timeout 400 python3 "$root/scripts/hf_crosscheck.py" --afd "$bin/afd" --out /tmp/afd_hf_gpu --device cuda \
        >"$out/hf_gpu.log" 2>&1
    echo "hf_crosscheck --device cuda exit $?"
    tail -14 "$out/hf_gpu.log" | sed 's/^/gpu /' | tee -a "$afd_summary"
fi
if has_phase engine; then
    stamp "attention_cuda_tests (CUDA ops, dense GPU engine, GPU attention role)"
    timeout "${AFD_T_ENGINE:-300}" "$bin/attention_cuda_tests" --gtest_color=no >"$out/attention_cuda_tests.log" 2>&1
    echo "attention_cuda_tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|rel" "$out/attention_cuda_tests.log" | head -40
    grep -E "^\[  (PASSED|FAILED) " "$out/attention_cuda_tests.log" | sed 's/^/attention_cuda_tests /' >>"$afd_summary"
    stamp "cli_tests (the CLI on the GPU)"
    timeout 300 "$bin/cli_tests" --gtest_color=no --gtest_filter='CudaCli.*:DeviceCli.*' >"$out/cli_tests.log" 2>&1
    echo "cli_tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected" "$out/cli_tests.log" | head -20
    grep -E "^\[  (PASSED|FAILED) " "$out/cli_tests.log" | sed 's/^/cli_tests /' >>"$afd_summary"
    stamp "full-width 4-layer checkpoint: dense CPU, dense GPU, GPU AFD over tcp"
    q4=/tmp/afd_q30l4
    timeout 200 "$bin/afd" gen-model --preset qwen3-30b-a3b --layers 4 --seed 1 --out "$q4" >"$out/q4.log" 2>&1
    prompts=(--prompt-ids 1,2,3,4,5,6,7,8 --prompt-ids 9,10,11 --max-tokens 8)
    timeout 300 "$bin/afd" generate --model "$q4" "${prompts[@]}" --json >"$out/q4_cpu.json" 2>>"$out/q4.log"
    timeout 200 "$bin/afd" generate --model "$q4" --device cuda "${prompts[@]}" --json >"$out/q4_gpu.json" 2>>"$out/q4.log"
    timeout 300 "$bin/afd" launch --model "$q4" --device cuda --ffn-device-ids 0,0 "${prompts[@]}" --json \
        --run-dir "$out/launch_q4_m2n" >"$out/q4_m2n.json" 2>>"$out/q4.log"
    timeout 300 "$bin/afd" launch --model "$q4" --device cuda --ffn-device-ids 0 "${prompts[@]}" --json \
        --additional-config '{"afd":{"num_attention_ranks":1,"num_ffn_ranks":1,"compute_gate_on_attention":false}}' \
        --run-dir "$out/launch_q4_p2p" >"$out/q4_p2p.json" 2>>"$out/q4.log"
    grep -E "GB/s|loaded|uploaded" "$out/q4.log" | head -6
    python3 - "$out" >>"$afd_summary" <<'PY'
import json, sys, os
def ids(name):
    try:
        out = json.load(open(os.path.join(sys.argv[1], name)))
        return [r["new_ids"] for r in out["results"]], out.get("afd", {})
    except Exception as e:
        return f"no result ({e})", {}
cpu, _ = ids("q4_cpu.json")
gpu, _ = ids("q4_gpu.json")
print(f"q30 4 layers: dense GPU ids {'==' if gpu == cpu else '!='} dense CPU ids")
for mode in ("m2n", "p2p"):
    got, afd = ids(f"q4_{mode}.json")
    print(f"q30 4 layers: GPU AFD {mode} ids {'==' if got == cpu else '!='} dense CPU ids; "
          f"matches its dense reference: {afd.get('matches_dense_reference')}, clean: {afd.get('clean_shutdown')}")
PY
    stamp "full 48-layer Qwen3-30B-A3B from random weights on one GPU"
    timeout 300 "$bin/afd" generate --preset qwen3-30b-a3b --random-weights --device cuda --prompt-ids 3,17,99 \
        --max-tokens 16 >"$out/q30_full.log" 2>&1
    echo "q30 full generate exit $?" | tee -a "$afd_summary"
    tail -3 "$out/q30_full.log"
fi
if has_phase attention; then
    stamp "attention_bench and PyTorch SDPA"
    timeout 300 "$bin/attention_bench" --csv "$out/attn_ours.csv" >"$out/attention.log" 2>&1
    echo "attention_bench exit $?"
    (cd "$root/bench/peers" && timeout 300 python3 torch_sdpa.py --csv "$out/attn_sdpa.csv" --ours "$out/attn_ours.csv") \
        >>"$out/attention.log" 2>&1
    echo "torch_sdpa exit $?"
    tail -40 "$out/attention.log"
fi
if has_phase generate; then
    stamp "afd bench generate (full-size Qwen3-30B-A3B, random weights)"
    timeout "${AFD_T_GENERATE:-420}" "$bin/afd" bench generate --csv "$out/generate_ours.csv" >"$out/generate.log" 2>&1
    echo "bench generate exit $?"
    (cd "$root/bench/peers" && timeout "${AFD_T_GENERATE_PEER:-420}" python3 torch_qwen3_moe.py \
        --csv "$out/generate_torch.csv" --ours "$out/generate_ours.csv") >>"$out/generate.log" 2>&1
    echo "torch_qwen3_moe exit $?"
    tail -40 "$out/generate.log"
fi
if has_phase gemm; then
    stamp "afd bench gemm (the attention side's cuBLASLt GEMMs at decode row counts)"
    timeout 300 "$bin/afd" bench gemm --csv "$out/gemm.csv" >"$out/gemm.log" 2>&1
    echo "bench gemm exit $?"
    grep -E " (engine|best_invariant|best_any) " "$out/gemm.log" | awk '$4 <= 8' | cut -c1-90
fi
if has_phase serve; then
    stamp "afd serve under afd bench serve (scripts/serve_gpu.sh; AFD_SERVE_AFD=1 adds AFD m2n 1A2F under MPS)"
    timeout "${AFD_T_SERVE:-900}" "$root/scripts/serve_gpu.sh" "$bin" "$out" >"$out/serve.log" 2>&1
    echo "serve_gpu exit $?"
    tail -16 "$out/serve.log"
fi
if has_phase ab && [ -n "${AFD_AB_OLD:-}" ]; then
    stamp "afd bench moe: this build against $AFD_AB_OLD, in turn"
    for round in 1 2; do
        for b in "$AFD_AB_OLD" "$bin/afd"; do
            timeout 120 "$b" bench moe --tokens 1,64,1024,16384 --routing uniform,zipf --no-stages --reps 100 2>&1 |
                awk -v p="r$round $b" '$1 ~ /^[0-9]+$/ { print p, $0 }'
        done
    done >"$out/ab.log"
    echo "ab exit $?"
    cat "$out/ab.log"
fi
if has_phase tokenizer && [ -x "$bin/tokenizer_bench" ]; then
    stamp "tokenizer_bench and HF tokenizers"
    tok="$root/third_party/tokenizer/tokenizer.json"
    timeout 200 "$bin/tokenizer_bench" --tokenizer="$tok" --write-corpus=/tmp/afd_corpus.json \
        --write-ids=/tmp/afd_ids.json >"$out/tokenizer.log" 2>&1
    echo "tokenizer_bench exit $?"
    timeout 200 python3 "$root/bench/peers/hf_tokenize.py" --tokenizer "$tok" --corpus /tmp/afd_corpus.json \
        --check-ids /tmp/afd_ids.json >>"$out/tokenizer.log" 2>&1
    echo "hf_tokenize exit $?"
    tail -30 "$out/tokenizer.log"
fi
if has_phase afd; then
    stamp "GPU AFD over cuda_ipc (scripts/gpu_afd.sh)"
    timeout "${AFD_T_AFD:-1500}" "$root/scripts/gpu_afd.sh" "$bin" "$out" >"$out/gpu_afd.log" 2>&1
    echo "gpu_afd exit $?"
    tail -40 "$out/gpu_afd.log"
fi
stamp "summary"
if has_phase bench || has_phase peers; then
    python3 "$root/bench/peers/report.py" "$out/ours.csv" "$out/grouped_mm.csv" "$out/triton_fused.csv"
fi
cat "$afd_summary"
if [ "${AFD_BUNDLE:-0}" = 1 ]; then
    # Everything but this script's own log (the caller's redirect, if it writes there), in one file.
    if (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name gpu_check.log ! -name bundle.tgz -print0 |
        tar --null -czf bundle.tgz --files-from=- --remove-files); then
        echo "gpu_check: bundled $out/bundle.tgz"
    else
        echo "gpu_check: bundling failed; the files stay in $out"
    fi
fi
