// MoE router (Qwen3-MoE / HF semantics):
//   logits = x · gate_w^T                              [T, E]
//   probs  = softmax(logits) in FP32                   [T, E]
//   top-k of probs (ties: lower expert id first), then if norm_topk_prob: weights /= sum of the k weights
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "kernels/moe.h"

namespace afd::model {
struct ModelConfig;
}

namespace afd::kernels {

struct RouterParams {
    int64_t num_tokens = 0;   // T
    int64_t hidden = 0;       // H
    int64_t num_experts = 0;  // E (all experts of the model)
    int64_t top_k = 0;        // K
    bool norm_topk_prob = true;
    ActDType act_dtype = ActDType::kF32;

    const void* x = nullptr;             // [T, H] act_dtype
    const core::Bf16* gate_w = nullptr;  // [E, H]
    float* logits = nullptr;             // [T, E] optional (may be null): the raw router logits
    int32_t* topk_ids = nullptr;         // [T, K] global expert ids, in descending weight order
    float* topk_weights = nullptr;       // [T, K]
};

// The router of `config` (its expert count, top-k and norm_topk_prob) over `num_tokens` rows: the one place that
// fills RouterParams from a model config. `logits` stays null (not returned).
RouterParams routerParams(const model::ModelConfig& config, int64_t num_tokens, ActDType act_dtype, const void* x,
                          const core::Bf16* gate_w, int32_t* topk_ids, float* topk_weights);

void routerForwardCpu(const RouterParams& params);

}  // namespace afd::kernels
