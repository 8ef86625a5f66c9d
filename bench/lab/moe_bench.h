// `afd bench moe`: times the CUDA MoE layer on the device with CUDA-graph replay, rotating several layers of
// weights so that L2 holds none of them, and states each time against its floor measured in the same run:
//   floor = max(distinct experts touched x expert bytes / copy bandwidth, FLOPs / BF16 GEMM rate)
// with the copy bandwidth of a large device-to-device copy (bytes read + written) and the rate of a cuBLAS
// 8192^3 BF16 GEMM on random data. g++-includable (no CUDA headers). Throws core::Error on CUDA failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe_cuda.h"
#include "lab/bench_result.h"

namespace afd::lab {

struct MoeBenchOptions {
    std::vector<int64_t> tokens{1, 8, 64, 256, 1024, 4096, 16384};
    std::vector<std::string> routings{"uniform", "zipf"};  // zipf: expert of rank r drawn with weight 1/(r+1)^s
    std::vector<kernels::MoeTileConfig> tiles{kernels::MoeTileConfig::kAuto};  // each timed in turn (kAuto: planner)
    int64_t hidden = 2048;
    int64_t inter = 768;
    int64_t experts = 128;
    int64_t top_k = 8;
    double zipf_exponent = 1.0;
    int layers = 5;                           // weight sets rotated between replays (>= 4 keeps L2 cold)
    int reps = 100;                           // timed replays per point (median reported)
    int warmup = 10;                          // untimed replays per point, at least
    double warmup_ms = kSteadyStateWarmupMs;  // and at least this much device time of them (bench_result.h)
    bool stages = true;                       // also time the four stages apart (graphs of one stage each)
    // Diagnostic: "permute" or "combine" times the layer without that stage (the bound on what hiding it could gain;
    // the rows' tile gets "-no-<stage>"); empty: the whole layer.
    std::string omit_stage;
    std::string dump_routing_dir;  // if set, writes routing_<name>_T<T>.bin for the peer scripts (ffn_ranks 1 only)
    // R > 1: time FFN rank 0 of R as an m2n pool runs it. The rank holds experts [0, E / R) (contiguous ranges, as
    // the FFN ranks load them); the routing is drawn over all E experts, the entries of the other ranks' experts are
    // -1 (not served here) and the kernels are told MoeParams::routed_experts = E. The floor counts the experts this
    // rank touches and the FLOPs of the entries it serves.
    int ffn_ranks = 1;
    uint64_t seed = 1;
};

struct MoeBenchRow {
    int64_t tokens = 0;
    std::string routing;
    std::string tile;
    int64_t distinct_experts = 0;
    int64_t entries = 0;  // routing entries this rank serves (T * K with one FFN rank)
    double median_us = 0;
    double p10_us = 0;
    double p90_us = 0;
    double mem_floor_us = 0;
    double flop_floor_us = 0;
    double floor_us = 0;
    double pct_of_floor = 0;
    double tflops = 0;
    // Stage medians (0 when not timed).
    double permute_us = 0;
    double gate_up_us = 0;
    double down_us = 0;
    double combine_us = 0;
};

using MoeBenchResult = BenchResult<MoeBenchRow>;

MoeBenchResult runMoeBench(const MoeBenchOptions& options);

// What FFN rank 0 of an m2n pool serves of a routing drawn over every expert (MoeBenchOptions::ffn_ranks): ids of
// experts [0, local_experts) stay, every other id becomes -1 (not served here). Returns the entries it serves and sets
// *distinct to the experts it touches.
int64_t keepFirstRankEntries(std::vector<int32_t>& ids, int64_t local_experts, int64_t* distinct);

// Routing file written for the peers: int64 T, K, E; int32 ids [T * K]; float32 weights [T * K].
std::string routingFileName(const std::string& routing, int64_t tokens);

}  // namespace afd::lab
