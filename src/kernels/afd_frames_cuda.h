// The attention side's work on AFD frames on the GPU (device connectors): splitting an m2n router's choices into one
// FFN rank's local ids, and the combine that adds the FFN ranks' partial sums. Includable by g++: streams are `void*`.
#pragma once

#include <cstdint>

namespace afd::kernels {

// For one FFN rank owning experts [begin, end): local_ids[t, j] = ids[t, j] - begin where ids[t, j] is in the range,
// else -1; local_weights[t, j] = weights[t, j] there, else 0. Rows routed nowhere (-1) stay so.
struct SplitRoutingParams {
    int64_t rows = 0;
    int64_t top_k = 0;
    int32_t begin = 0;
    int32_t end = 0;
    const int32_t* ids = nullptr;    // [rows, K] model-global expert ids
    const float* weights = nullptr;  // [rows, K]
    int32_t* local_ids = nullptr;    // [rows, K]
    float* local_weights = nullptr;  // [rows, K]
};
void splitRoutingCuda(const SplitRoutingParams& params, void* stream);

inline constexpr int kMaxSummedPartials = 16;

// out[t, h] = ((0 + partials[0][t, h]) + partials[1][t, h]) + ...: the FFN ranks' FP32 partial sums added in rank
// order, so the result does not depend on which rank answered first. out may not alias a partial.
struct SumPartialsParams {
    int64_t rows = 0;
    int64_t cols = 0;
    int num_partials = 0;                            // 1 ... kMaxSummedPartials
    const float* partials[kMaxSummedPartials] = {};  // each [rows, cols]
    float* out = nullptr;                            // [rows, cols]
};
void sumPartialsCuda(const SumPartialsParams& params, void* stream);

// An FFN rank's check of the local expert ids that arrived in device frames (a peer's data, never trusted):
// ids[i] outside [-1, num_local) become -1 (routed nowhere, so no kernel indexes past the rank's experts) and the
// first such entry is recorded in *bad: {1, layer, i, the id}, written once (bad[0] is claimed atomically).
struct CheckLocalIdsParams {
    int64_t count = 0;  // rows × K
    int32_t num_local = 0;
    int32_t layer = 0;
    int32_t* ids = nullptr;  // [count], device
    int32_t* bad = nullptr;  // [4], device or host-mapped
};
void checkLocalIdsCuda(const CheckLocalIdsParams& params, void* stream);

}  // namespace afd::kernels
