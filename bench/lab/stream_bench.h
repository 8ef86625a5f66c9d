// `afd bench stream`: how fast a number of SMs (one CTA each) read device memory, and through which path: TMA bulk
// copies into a ring of shared-memory stages (how the grouped expert GEMMs stream their weights), plain loads by 128
// threads, both at once, and L2-resident bytes read beside the DRAM stream, by the same TMA stages (as the GEMMs' token
// tiles come beside their weights) or by the other path. Each figure is stated against
// the copy bandwidth measured in the same run. g++-includable (no CUDA headers). Throws core::Error on bad options
// (before touching the device) and on CUDA failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lab/bench_result.h"

namespace afd::lab {

// What each CTA of a stream mode reads (its own regions):
//   tma         DRAM by TMA, each stage stage_kib from DRAM and stage_l2_kib from an L2-resident buffer
//   tma-l2      an L2-resident buffer by TMA, stage_kib a stage
//   lsu         DRAM by 16-byte loads (16 KB in flight per CTA)
//   tma+lsu, tma-l2+lsu  both paths at once
//   tma+lsu-l2  DRAM by TMA (stage_kib a stage) and, for each stage landed, stage_l2_kib of an L2-resident buffer by
//               loads (the expert GEMMs' token tiles, read from L2 beside the weights, by the other path)
//   tma+cp-l2   the same with cp.async into shared memory instead of loads into registers
//   tma+cp-stage  DRAM by TMA, and stage_l2_kib of each stage copied from L2 by cp.async by 64 threads as its slot
//               frees, the stage full when both have landed (token rows by the load path, needed with their stage)
//   tma+cp128-stage  the same by 128 threads
//   lsu+tma-l2  DRAM by loads, and an L2-resident buffer by TMA stages of stage_kib, paced at half the loads' bytes
//               (the other split: weights by the load path, token tiles by TMA)
//   ld96, ld128 each stage's 32 KiB from DRAM loaded by 96 or 128 threads into registers (one stage ahead) and stored
//   to
//               shared memory in the 128-byte swizzle, and its stage_l2_kib by TMA; the stage full when both landed
//               (the layer's weights by a loader warpgroup, its token tiles by TMA)
//   cp96, cp128 the same with the DRAM bytes by cp.async into the stage
inline const std::vector<std::string>& streamBenchModes() {
    static const std::vector<std::string> modes{
        "tma",          "tma-l2",          "lsu",        "tma+lsu", "tma-l2+lsu", "tma+lsu-l2", "tma+cp-l2",
        "tma+cp-stage", "tma+cp128-stage", "lsu+tma-l2", "ld96",    "ld128",      "cp96",       "cp128"};
    return modes;
}

inline const std::vector<std::string>& streamBenchPolicies() {
    static const std::vector<std::string> policies{"none", "normal", "first", "layer"};
    return policies;
}

struct StreamBenchOptions {
    // The modes that need no L2 bytes beside them (tma+lsu-l2, tma+cp-l2, tma+cp-stage and tma+cp128-stage need
    // stage_l2_kib > 0).
    std::vector<std::string> modes{"tma", "tma-l2", "lsu", "tma+lsu", "tma-l2+lsu"};
    std::vector<int> sms{8, 16, 33, 66, 99, 132};  // CTAs, one per SM (capped at the device's SM count)
    std::vector<int> stages{6};                    // TMA ring stages
    int stage_kib = 32;  // KiB of each TMA stage from DRAM (tma-l2: from L2); 32 with ld96, ld128, cp96, cp128
    // KiB of L2-resident bytes per TMA stage besides (0 or an even divisor of 128): in the stage itself (tma, ld96,
    // ld128, cp96 and cp128 by TMA,
    // tma+cp-stage and tma+cp128-stage by cp.async), or read by the load path for each stage landed (tma+lsu-l2,
    // tma+cp-l2); not 0 in the last four.
    std::vector<int> stage_l2_kib{0};
    // L2 policies of the reads (each point with each; streamBenchPolicies): "none" (no cache hint), "normal" (every
    // read with an evict_normal policy), "first" (DRAM bytes evict_first), "layer" (the expert GEMMs': DRAM bytes
    // evict_first, L2-resident bytes evict_last, so that the stream does not evict them).
    std::vector<std::string> policies{"none"};
    // Pieces of each TMA stage's DRAM bytes (each point with each; StreamKernelArgs::dram_pieces): 1 reads a stage as
    // one run; 4 as the expert GEMMs read a 32 KiB stage of packed weights (four 8 KiB blocks, 256 KiB apart).
    std::vector<int> pieces{1};
    int64_t bytes_per_path = 24ll << 20;      // bytes each path of a CTA reads
    int reps = 5;                             // timed launches per point (median reported)
    double warmup_ms = kSteadyStateWarmupMs;  // device time of copies before the copy-rate measurement
};

struct StreamBenchRow {
    std::string mode;
    std::string policy;
    int pieces = 1;
    int sms = 0;
    int stages = 0;  // TMA ring (0: no TMA path)
    int stage_kib = 0;
    int stage_l2_kib = 0;
    // DRAM bytes of all CTAs over the window from the first CTA's start to the last DRAM path's end.
    double dram_tbps = 0;
    double pct_of_copy = 0;  // dram_tbps against the copy bandwidth
    // Each path's bytes per CTA over the CTA's own time to that path's end, the median over the CTAs (0: no such path);
    // the TMA path's bytes are its DRAM and L2 bytes together, the load path's its L2 bytes in tma+lsu-l2 and
    // tma+cp-l2.
    double tma_gbps_per_sm = 0;
    double lsu_gbps_per_sm = 0;
};

using StreamBenchResult = BenchResult<StreamBenchRow>;

StreamBenchResult runStreamBench(const StreamBenchOptions& options);

}  // namespace afd::lab
