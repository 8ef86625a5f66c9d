// Per-expert routing counters on the GPU (Hopper): the routing entries a layer sends to each expert, added into
// 64-bit totals that live in device memory, so that a rank routing on its GPU counts its experts' load with no host
// synchronisation per call (capturable in the layer's CUDA graph). Includable by g++: no CUDA headers; streams are
// passed as `void*` (a cudaStream_t).
#pragma once

#include <cstdint>

namespace afd::kernels {

// The most experts the counting kernel tallies (one 32-bit shared-memory slot each per block).
inline constexpr int64_t kMaxCountedExperts = 8192;

// counts[e] += the entries (t, j) with t < *num_valid and topk_ids[t, j] == e; ids outside [0, num_experts) (-1:
// routed nowhere) are skipped. num_valid is read on the device, so a graph captured at a bucket size counts each
// replay's real rows (the padding rows after them are left out); null counts all num_rows.
struct ExpertTokenCountParams {
    int64_t num_rows = 0;                // T_pad: the rows topk_ids holds
    int64_t top_k = 0;                   // K
    int64_t num_experts = 0;             // E, 1 ... kMaxCountedExperts
    const int32_t* num_valid = nullptr;  // [1] rows counted (clamped to [0, num_rows]), or null
    const int32_t* topk_ids = nullptr;   // [T_pad, K]
    uint64_t* counts = nullptr;          // [E] running totals, updated with 64-bit atomic adds
};

// One small kernel on `stream`; asynchronous; capturable.
void countExpertTokensCuda(const ExpertTokenCountParams& params, void* stream);

// snapshot[e] = counts[e] for e < num_counters, each read as one whole 64-bit load: safe while kernels on other
// streams add to `counts` (each value is one that the counter held). Device pointers; asynchronous on `stream`.
void snapshotCountersCuda(const uint64_t* counts, uint64_t* snapshot, int64_t num_counters, void* stream);

}  // namespace afd::kernels
