// ModelConfig: the fields of a HF `config.json` for Qwen3MoeForCausalLM (model_type "qwen3_moe") that the
// engine uses. Both spellings found in the wild parse to the same struct:
//   hub form          num_experts,       rope_theta,                   torch_dtype
//   transformers 5.x  num_local_experts, rope_parameters.rope_theta,  dtype
// Every field that changes the math is honoured; anything this engine does not compute (another architecture,
// rope scaling, sliding window, another activation …) is refused with an error naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace afd::model {

struct ModelConfig {
    std::string architecture = "Qwen3MoeForCausalLM";
    std::string model_type = "qwen3_moe";

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;      // dense SwiGLU MLP layers (mlp_only_layers / decoder_sparse_step)
    int64_t moe_intermediate_size = 0;  // each routed expert
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;
    int64_t head_dim = 0;               // independent of hidden_size / num_attention_heads
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    bool norm_topk_prob = true;
    bool tie_word_embeddings = false;
    bool attention_bias = false;        // q/k/v/o projections carry a bias
    double rms_norm_eps = 1e-6;
    double rope_theta = 1e6;
    int64_t max_position_embeddings = 0;
    core::DType dtype = core::DType::kBf16;  // checkpoint weight dtype
    std::vector<int64_t> eos_token_ids;       // may be empty
    int64_t bos_token_id = -1;                // -1 when absent

    // HF rule: a layer is MoE iff it is not in mlp_only_layers, num_experts > 0 and
    // (layer + 1) % decoder_sparse_step == 0. Other layers run a dense SwiGLU MLP of intermediate_size.
    bool isMoeLayer(int64_t layer) const;
    int64_t numMoeLayers() const;
    int64_t qSize() const { return num_attention_heads * head_dim; }
    int64_t kvSize() const { return num_key_value_heads * head_dim; }

    // Checks sizes and ratios (positive sizes, heads divisible by kv heads, top-k ≤ experts, layer indices in
    // range …). Messages name the field and the rule.
    core::Status validate() const;

    // Parses config.json text; `source` (usually the path) prefixes every error. Calls validate().
    static core::Result<ModelConfig> fromJson(std::string_view text, std::string_view source);
    static core::Result<ModelConfig> fromFile(const std::string& path);
    // Built-in shapes for `afd gen-model --preset`: "tiny", "small", "qwen3-30b-a3b".
    static core::Result<ModelConfig> preset(std::string_view name);
    static std::vector<std::string> presetNames();

    // config.json text in the hub form (what `afd gen-model` writes), parseable by transformers.
    std::string toJson() const;
};

}  // namespace afd::model
