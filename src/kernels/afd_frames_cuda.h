// The work on AFD frames on the GPU (device connectors): on the attention side, splitting an m2n router's choices into
// one FFN rank's local ids and the combine that adds the FFN ranks' partial sums; on an FFN rank, the gather of the
// frames it received into one batch. Includable by g++: streams are `void*`.
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
// order, so the result does not depend on which rank answered first. out may not alias a partial. Launched with
// programmatic dependent launch, as the gather is.
struct SumPartialsParams {
    int64_t rows = 0;
    int64_t cols = 0;
    int num_partials = 0;                            // 1 ... kMaxSummedPartials
    const float* partials[kMaxSummedPartials] = {};  // each [rows, cols]
    float* out = nullptr;                            // [rows, cols]
};
void sumPartialsCuda(const SumPartialsParams& params, void* stream);

inline constexpr int kMaxGatheredPeers = 16;

// Where the routing of an FFN rank's gathered rows comes from.
enum class GatheredRouting : int32_t {
    kFromFrames = 0,  // an m2n MoE layer: each frame's local ids and weights, checked and counted
    kDense = 1,       // a dense layer: every row to expert 0 with weight 1 (top_k 1)
    kRouterHere = 2,  // a p2p MoE layer: this rank's router writes ids and weights later; only x is gathered
};

// An FFN rank's gather of one (layer, stage)'s device frames into its batch, in one launch: the peers' rows back to
// back in peer order, padded to padded_rows (x zero; ids -1 and weights 0 unless kRouterHere). The frames' ids are a
// peer's data, never trusted: with kFromFrames an id outside [-1, num_local) becomes -1 (routed nowhere, so no kernel
// indexes past the rank's experts) and the first such entry is recorded in *bad: {1, layer, entry of the batch, the
// id}, written once (bad[0] is claimed atomically); the good ones of the real rows are added to counts.
// Launched with programmatic dependent launch: it may start while the kernel before it (the connector's wait) runs,
// and reads the frames only once that kernel has finished.
struct GatherFfnRowsParams {
    int num_peers = 0;                             // 0 ... kMaxGatheredPeers
    const uint16_t* x[kMaxGatheredPeers] = {};     // each [rows[p], hidden] bf16 bits
    const int32_t* ids[kMaxGatheredPeers] = {};    // each [rows[p], top_k] (kFromFrames)
    const float* weights[kMaxGatheredPeers] = {};  // each [rows[p], top_k] (kFromFrames)
    int64_t rows[kMaxGatheredPeers] = {};
    int64_t hidden = 0;
    int64_t top_k = 0;
    int64_t padded_rows = 0;  // >= the sum of rows
    GatheredRouting routing = GatheredRouting::kFromFrames;
    int32_t num_local = 0;          // the rank's experts (kFromFrames)
    int32_t layer = 0;              // for the record in bad
    uint16_t* out_x = nullptr;      // [padded_rows, hidden]
    int32_t* out_ids = nullptr;     // [padded_rows, top_k] (not with kRouterHere)
    float* out_weights = nullptr;   // [padded_rows, top_k] (not with kRouterHere)
    int32_t* bad = nullptr;         // [4] (kFromFrames)
    uint64_t* counts = nullptr;     // [num_local] running totals (kFromFrames), or null
    int32_t* valid_rows = nullptr;  // [1]: set to the sum of rows, or null
};
void gatherFfnRowsCuda(const GatherFfnRowsParams& params, void* stream);

}  // namespace afd::kernels
