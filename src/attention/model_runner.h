// One forward pass of the decoder over a batch of token chunks (prefill chunks and decodes mixed):
//   embedding → per layer [input norm → attention (q/k norm, RoPE, paged KV) → residual → post norm →
//   MLP/MoE through the MlpBackend → residual] → final norm → LM head (only for the rows that sample).
// The batch may be split into two stages (dual-batch overlap): stage s's attention runs while the backend works
// on the other stage's MLP. Owns its FP32 workspaces; not thread-safe (the engine thread).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kv_cache.h"
#include "attention/mlp_backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

struct ForwardBatch {
    std::vector<int32_t> tokens;        // [T]
    std::vector<int32_t> positions;     // [T] position of each token in its sequence
    std::vector<int32_t> token_seq;     // [T] row of block_tables holding the token's sequence
    std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], -1 padded
    int64_t max_blocks_per_seq = 0;
    std::vector<int64_t> logits_rows;   // tokens whose logits are returned, in this order
    std::vector<int64_t> stage_starts;  // first token of each stage: {0} or {0, T0}
    int64_t numTokens() const { return static_cast<int64_t>(tokens.size()); }
};

class ModelRunner {
public:
    ModelRunner(const model::ModelConfig& config, const model::ModelWeights& weights, KvCache& kv_cache,
                MlpBackend& backend);

    // Returns logits [logits_rows.size(), vocab_size] FP32. `step` numbers the step for the backend;
    // `last` tells it no step follows.
    core::Result<core::Tensor> forward(const ForwardBatch& batch, uint64_t step, bool last);

private:
    void attentionBlock(int64_t layer, const ForwardBatch& batch, int64_t begin, int64_t end);

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    KvCache& kv_cache_;
    MlpBackend& backend_;
    // Workspaces, [T, …] FP32, grown as needed.
    std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, mlp_out_, cos_, sin_;
};

}  // namespace afd::attention
