// Token selection on the device: one id per row of logits, greedy or sampled with per-row temperature, top-k, top-p
// and seed. Includable by g++: no CUDA headers; streams are `void*` (a cudaStream_t, nullptr = the default stream).
//
// Per row r, as the CPU sampler (attention/sampler.cpp) defines the distribution:
//   temperature[r] == 0 (or not > 0), or top_k[r] == 1: the argmax, first index on ties, NaN never wins
//     (argmaxCpu, bit for bit).
//   otherwise: the candidates are the top_k[r] largest logits (ties: lower id first; all of them when top_k <= 0 or
//     >= vocab_size); p_i = exp((l_i - max) / temperature); the nucleus is the smallest prefix of the candidates in
//     that order whose share of their probability reaches top_p[r] (all of them when top_p >= 1); the id is drawn
//     within the nucleus with probability proportional to p_i. NaN logits are never drawn.
// The draw is samplingUniform(seed[r], offset[r]): the same (seed, offset) gives the same id whatever the other rows,
// and the same inputs give the same ids on every run. Probabilities are FP32 (the CPU sampler's are double): a nucleus
// whose cumulative share reaches top_p within float rounding may end one candidate apart.
//
// One CTA per row, no workspace. Greedy reads the row once; top_k up to 1024 and top-p without top-k (with a nucleus
// that fits 2048 candidates) read it twice: a pass that finds the maximum and each thread's four largest logits
// (a bound on the threshold), then one that collects the logits above the bound, which are sorted in shared memory;
// temperature alone reads it twice (maximum and sum, then the draw). Other rows take a radix select over the row
// (several more passes). Asynchronous, no allocation, no host synchronisation: capturable in a CUDA graph.
#pragma once

#include <cstdint>

#include "core/bf16.h"  // AFD_HOST_DEVICE

namespace afd::kernels {

struct SampleTokensParams {
    int64_t num_rows = 0;                // R
    int64_t vocab_size = 0;              // V, at most kMaxSampleVocab
    const float* logits = nullptr;       // [R, V], 4-byte aligned (16-byte aligned with V % 4 == 0 reads faster)
    const float* temperature = nullptr;  // [R]; 0: greedy. null: every row greedy (the arrays below are not read)
    const int32_t* top_k = nullptr;      // [R]; <= 0: off. null: off for every row
    const float* top_p = nullptr;        // [R]; >= 1: off. null: off for every row
    const uint64_t* seed = nullptr;      // [R], or null: 0
    const uint64_t* offset = nullptr;    // [R] e.g. the sequence's output index, or null: 0
    int32_t* out_ids = nullptr;          // [R]
};
inline constexpr int64_t kMaxSampleVocab = int64_t{1} << 30;

// Enqueues the selection of every row on `stream` (device pointers; checked: shapes, null pointers, alignment).
void sampleTokensCuda(const SampleTokensParams& params, void* stream);

// The uniform draw in [0, 1) of a row with this seed and offset: a counter-based hash (splitmix64's finaliser), the
// same on the host and the device.
AFD_HOST_DEVICE inline uint64_t samplingMix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

AFD_HOST_DEVICE inline double samplingUniform(uint64_t seed, uint64_t offset) {
    constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
    const uint64_t z = samplingMix64(samplingMix64(seed ^ 0x5851F42D4C957F2Dull) + (offset + 1) * kGolden);
    return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // 53 bits / 2^53
}

}  // namespace afd::kernels
