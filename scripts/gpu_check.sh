#!/usr/bin/env bash
# The GPU check, run on a machine with a Hopper GPU: build the CUDA backend, run the GPU tests, run
# `afd bench moe` and the two peers on the same routing, print a short table last.
#   scripts/gpu_check.sh
# Environment:
#   OUT            folder for logs and CSVs (default: gpu_out in the repository root)
#   AFD_GPU_DEPS   unpacked build dependencies from scripts/stage_gpu_deps.sh (default: .gpu_deps/root)
#   AFD_PREBUILT   folder holding `afd` and `kernels_cuda_tests` built elsewhere for this machine; used when they
#                  start here, otherwise the script builds (build-gpu/)
#   AFD_PHASES     which phases to run, default "tests bench sweep peers"
#   AFD_REPS       timed replays per point (default 100; the peers use half)
# Every phase has a time limit so that the table still prints when one phase hangs or fails.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu_out}"
deps="${AFD_GPU_DEPS:-$root/.gpu_deps/root}"
phases="${AFD_PHASES:-tests bench sweep peers}"
reps="${AFD_REPS:-100}"
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
            -DAFD_BUILD_FUZZ=OFF -DAFD_BUILD_BENCH=OFF ${nccl_root:+-DAFD_NCCL_ROOT=$nccl_root} &&
            timeout 420 ninja -C "$build" kernels_cuda_tests afd
    } >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "gpu_check: build failed"; exit 1; }
    grep -E "registers|spill|C75" "$out/build.log" | sort | uniq -c | head -40
    mkdir -p "$build/bin" && cp "$build/src/afd" "$build/tests/kernels_cuda_tests" "$build/bin/"
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
    timeout 300 "$bin/kernels_cuda_tests" --gtest_color=no >"$out/tests.log" 2>&1
    echo "kernels_cuda_tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|rel|Expected" "$out/tests.log" | head -40
fi

routing_dir=/tmp/afd_routing
mkdir -p "$routing_dir"
if has_phase bench; then
    stamp "afd bench moe"
    timeout 240 "$bin/afd" bench moe --reps "$reps" --csv "$out/ours.csv" --dump-routing "$routing_dir" \
        >"$out/bench.log" 2>&1
    echo "bench exit $?"
    cat "$out/bench.log"
fi
if has_phase sweep; then
    stamp "tile sweep"
    timeout 150 "$bin/afd" bench moe --no-stages --reps 30 --tokens 1,8,64,256,1024 \
        --tiles small16,small32,small64,small128,wide128,wide256 >>"$out/bench.log" 2>&1
    timeout 90 "$bin/afd" bench moe --no-stages --reps 15 --tokens 4096,16384 --tiles small128,wide128,wide256 \
        >>"$out/bench.log" 2>&1
    echo "sweep exit $?"
fi
if has_phase peers; then
    peer_reps=$((reps / 2))
    for peer in grouped_mm_moe triton_fused_moe; do
        stamp "peer $peer"
        (cd "$root/bench/peers" &&
            timeout 200 python3 "$peer.py" --routing-dir "$routing_dir" --reps "$peer_reps" \
                --csv "$out/${peer%%_moe}.csv") >>"$out/peers.log" 2>&1
        echo "$peer exit $?"
    done
    grep -vE "^  " "$out/peers.log" | tail -40
fi
stamp "summary"
python3 "$root/bench/peers/report.py" "$out/ours.csv" "$out/grouped_mm.csv" "$out/triton_fused.csv"
