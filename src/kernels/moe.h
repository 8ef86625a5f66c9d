// Routed-expert MoE over the experts held locally (all experts in the dense engine and p2p; one contiguous
// range on an m2n FFN rank):
//
//   out[t] = sum over j < top_k with topk_ids[t, j] >= 0 of  topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t])
//   expert_e(v) = W2[e] · ( silu(Wg[e] · v) ⊙ (Wu[e] · v) )
//
// Weight layout (what loaders produce and every backend consumes):
//   w13 [num_experts, 2 * inter, hidden]  rows [0, inter) are gate_proj, rows [inter, 2*inter) are up_proj
//   w2  [num_experts, hidden, inter]      down_proj
// A dense SwiGLU MLP layer is the same computation with num_experts = 1, top_k = 1, ids 0 and weights 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/bf16.h"

namespace afd::kernels {

// Element type of activations (x, out). Weights are always bf16.
enum class ActDType { kF32, kBf16 };

struct MoeParams {
    int64_t num_tokens = 0;   // T (0 is valid: nothing to do)
    int64_t hidden = 0;       // H
    int64_t inter = 0;        // I
    int64_t num_experts = 0;  // E_local: valid ids are [0, num_experts)
    int64_t top_k = 0;        // K: routing entries per token
    // Experts the routing chooses among, across every FFN rank (0: num_experts, one rank serves them all). Only the
    // CUDA backend's choices by routing entries per expert read it: this rank expects to serve
    // T K num_experts / routed_experts of the T K entries, which the host cannot count before the launch.
    int64_t routed_experts = 0;
    ActDType act_dtype = ActDType::kF32;

    const void* x = nullptr;              // [T, H] act_dtype
    const int32_t* topk_ids = nullptr;    // [T, K] local expert id, or -1 for an entry not served here
    const float* topk_weights = nullptr;  // [T, K]
    const core::Bf16* w13 = nullptr;      // [E_local, 2*I, H]
    const core::Bf16* w2 = nullptr;       // [E_local, H, I]
    void* out = nullptr;                  // [T, H] act_dtype (FP32 with out_f32), overwritten (zero for tokens
                                          // with no local entry)
    // out is FP32 whatever act_dtype: the sums over each token's entries leave unrounded, so that partial sums of
    // several FFN ranks add up as the whole sum of one rank does (up to FP32 rounding), and the residual add reads
    // them as they were summed.
    bool out_f32 = false;
    // CPU reference only: each expert's h (the SwiGLU product) and y (its down projection) rounded to bf16 where the
    // CUDA kernels store them, so that the reference computes at the GPU layer's precision.
    bool bf16_intermediates = false;
    // CUDA backend: other processes' kernels may hold SMs while this layer runs (an MPS client: ranks sharing a GPU).
    // The plan then takes no tile whose kernel waits across the CTAs of its own grid (the token-TMA tiles gather the
    // token rows in the producer warps of every CTA, and an item waits for rows another CTA gathers), since a
    // persistent grid sized for the whole device need not be resident at once.
    bool shared_sms = false;
};

// CPU reference: FP32 arithmetic from bf16 weights; with act_dtype kBf16 the inputs are read as bf16 and
// each output is rounded to bf16 once. Uses the process thread pool. Throws afd::core::Error on an id
// outside [-1, num_experts).
void moeForwardCpu(const MoeParams& params);

}  // namespace afd::kernels
