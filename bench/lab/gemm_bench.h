// `afd bench gemm`: the attention side's dense GEMMs (kernels/cuda/blas/cublaslt_gemm.h) at decode row counts, every
// algorithm cuBLASLt offers for each shape timed side by side: the engine's choice (the first batch-invariant
// heuristic result), the fastest batch-invariant one, the fastest with split-K forced to each count (a deterministic
// FP32 reduction; invariant across M only where the rows match bit for bit, which the benchmark checks), and the
// fastest of all (split-K and stream-K included). Each call in a CUDA graph of calls over rotated weight copies, so L2
// holds none (as in a decode step); floor = (weights + x + y) / copy bandwidth, or the FLOPs over the GEMM rate when
// higher. g++-includable (no CUDA headers). Throws core::Error on CUDA failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lab/bench_result.h"

namespace afd::lab {

struct GemmBenchShape {
    std::string name;  // e.g. "qkv_proj"
    int64_t n = 0;     // output features
    int64_t k = 0;     // input features
    bool f32_out = true;
};

struct GemmBenchOptions {
    // Qwen3-30B-A3B's: the fused QKV projection and o_proj (FP32 outputs, as the engine keeps them) and the LM head.
    std::vector<GemmBenchShape> shapes{
        {"qkv_proj", 5120, 2048, true}, {"o_proj", 2048, 4096, true}, {"lm_head", 151936, 2048, true}};
    std::vector<int64_t> rows{1, 2, 4, 8, 16, 32, 64, 128, 256};
    std::vector<int> splits{2, 3, 4, 6, 8, 12, 16};
    int64_t reference_rows = 256;  // the bit-for-bit check compares row 0 at M = 1 with row 0 at this M
    int reps = 20;
    int warmup = 3;
    double warmup_ms = kSteadyStateWarmupMs;
    int64_t rotate_mib = 256;  // weight copies rotated: at least this much, at least 2 copies
    uint64_t seed = 1;
};

struct GemmBenchRow {
    std::string shape;
    int64_t n = 0;
    int64_t k = 0;
    int64_t m = 0;
    std::string kind;  // "engine", "best_invariant", "split<S>", "best_any"
    std::string algo;  // GemmAlgoInfo::toString() of the algorithm
    int candidates = 0;
    double median_us = 0;
    double floor_us = 0;
    double pct_of_floor = 0;
    double read_tbps = 0;  // bytes of weights + x + y per median call
    // split<S>: row 0 of M = 1 equals row 0 of M = reference_rows bit for bit, each with its fastest S-way algorithm
    std::string bitwise = "-";
};

using GemmBenchResult = BenchResult<GemmBenchRow>;

GemmBenchResult runGemmBench(const GemmBenchOptions& options);

}  // namespace afd::lab
