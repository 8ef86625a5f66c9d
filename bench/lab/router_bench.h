// `afd bench router`: times the CUDA router (routerForwardCuda: logits GEMM, softmax, top-k, renormalisation) with
// CUDA-graph replay, rotating enough gate weight sets that L2 holds none of them (as in a decode step, where the MoE
// weights of the layer before stream through L2), and states each time against its floor measured in the same run:
//   floor = max((gate weights + x + ids and weights out) / copy bandwidth, 2 T E H / BF16 GEMM rate)
// g++-includable (no CUDA headers). Throws core::Error on CUDA failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lab/bench_result.h"

namespace afd::lab {

struct RouterBenchOptions {
    std::vector<int64_t> tokens{1, 8, 64, 256, 1024, 4096, 16384};
    int64_t hidden = 2048;
    int64_t experts = 128;
    int64_t top_k = 8;
    bool renormalize = true;
    int weight_sets = 256;  // gate weight sets rotated between replays (256 x 512 KB = 128 MB at the defaults)
    int reps = 200;         // timed replays per point (median reported)
    int warmup = 20;        // untimed replays per point, at least
    double warmup_ms = kSteadyStateWarmupMs;  // and at least this much device time of them (bench_result.h)
    uint64_t seed = 1;
};

struct RouterBenchRow {
    int64_t tokens = 0;
    double median_us = 0;
    double p10_us = 0;
    double p90_us = 0;
    double mem_floor_us = 0;
    double flop_floor_us = 0;
    double floor_us = 0;
    double pct_of_floor = 0;
};

using RouterBenchResult = BenchResult<RouterBenchRow>;

RouterBenchResult runRouterBench(const RouterBenchOptions& options);

}  // namespace afd::lab
