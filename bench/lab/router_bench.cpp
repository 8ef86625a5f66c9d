#include "lab/router_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/moe_cuda.h"
#include "lab/bench_timing.h"

namespace afd::lab {

RouterBenchResult runRouterBench(const RouterBenchOptions& o) {
    AFD_CHECK(deviceCount() > 0, "afd bench router needs a CUDA device");
    AFD_CHECK(o.weight_sets >= 1 && o.reps >= 1, "bench router: weight_sets {} and reps {} must be >= 1", o.weight_sets,
              o.reps);
    Stream stream;
    const cudaStream_t s = stream.get();
    RouterBenchResult result = startBenchResult<RouterBenchRow>(s, o.warmup_ms);

    const int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
    const size_t gate_bytes = static_cast<size_t>(o.experts * o.hidden) * 2;
    // One allocation holds every weight set, each at a 256-byte aligned offset.
    const size_t gate_stride = (gate_bytes + 255) / 256 * 256;
    DeviceMemory gates(gate_stride * static_cast<size_t>(o.weight_sets));
    DeviceMemory x(static_cast<size_t>(max_tokens * o.hidden) * 2);
    DeviceMemory ids(static_cast<size_t>(max_tokens * o.top_k) * 4);
    DeviceMemory weights(static_cast<size_t>(max_tokens * o.top_k) * 4);
    DeviceMemory workspace(kernels::routerCudaWorkspaceBytes(max_tokens, o.hidden, o.experts));
    fillRandom(gates.get(), gates.bytes() / 2, o.seed * 1000 + 1, 2.0f / static_cast<float>(o.hidden), s);
    fillRandom(x.get(), x.bytes() / 2, o.seed * 1000 + 2, 1.0f, s);
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));

    for (const int64_t tokens : o.tokens) {
        auto params = [&](int set) {
            kernels::RouterParams p;
            p.num_tokens = tokens;
            p.hidden = o.hidden;
            p.num_experts = o.experts;
            p.top_k = o.top_k;
            p.norm_topk_prob = o.renormalize;
            p.act_dtype = kernels::ActDType::kBf16;
            p.x = x.get();
            p.gate_w = reinterpret_cast<const core::Bf16*>(static_cast<const uint8_t*>(gates.get()) +
                                                           gate_stride * static_cast<size_t>(set));
            p.topk_ids = ids.as<int32_t>();
            p.topk_weights = weights.as<float>();
            return p;
        };
        kernels::routerForwardCuda(params(0), workspace.get(), workspace.bytes(), s);  // eager: module load
        std::vector<std::unique_ptr<Graph>> graphs;
        for (int set = 0; set < o.weight_sets; ++set) {
            graphs.push_back(std::make_unique<Graph>(
                s, [&] { kernels::routerForwardCuda(params(set), workspace.get(), workspace.bytes(), s); }));
        }
        AFD_CUDA_CHECK(cudaStreamSynchronize(s));
        const Timing t = timeRuns(
            s, o.warmup, o.reps, [&](int i) { graphs[static_cast<size_t>(i % o.weight_sets)]->launch(s); },
            o.warmup_ms);
        RouterBenchRow row;
        row.tokens = tokens;
        row.median_us = t.median_us;
        row.p10_us = t.p10_us;
        row.p90_us = t.p90_us;
        const double bytes = static_cast<double>(gate_bytes) + static_cast<double>(tokens * o.hidden) * 2.0 +
                             static_cast<double>(tokens * o.top_k) * 8.0;
        const double flops = 2.0 * static_cast<double>(tokens * o.experts * o.hidden);
        row.mem_floor_us = bytes / (result.copy_tbps * 1e12) * 1e6;
        row.flop_floor_us = flops / (result.gemm_tflops * 1e12) * 1e6;
        row.floor_us = std::max(row.mem_floor_us, row.flop_floor_us);
        row.pct_of_floor = 100.0 * row.floor_us / row.median_us;
        result.rows.push_back(row);
    }
    return result;
}

}  // namespace afd::lab
