// ModelConfig: the fields of a HF `config.json` for Qwen3MoeForCausalLM (model_type "qwen3_moe") that the
// engine uses. Both spellings found in the wild parse to the same struct:
//   hub form          num_experts,       rope_theta,                   torch_dtype
//   transformers 5.x  num_local_experts, rope_parameters.rope_theta,  dtype
// Every field that changes the math is honoured; anything this engine does not compute (another architecture,
// rope scaling, sliding window, another activation …) is refused with an error naming the field.
//
// Absent fields take the defaults of transformers' Qwen3MoeConfig (so a config parses here to the model
// transformers would build): vocab 151936, hidden 2048, intermediate 6144, 24 layers, 32 heads, 4 kv heads
// (a constant, not num_attention_heads), head_dim hidden_size / num_attention_heads, max positions 32768,
// rms_norm_eps 1e-6, rope_theta 10000, 128 experts top-8, moe_intermediate 768, decoder_sparse_step 1,
// mlp_only_layers [], norm_topk_prob false, tie_word_embeddings false, attention_bias false, no bos / eos.
// An absent weight dtype is taken as bfloat16 (the checkpoint's tensor dtypes are checked when loading).
//
// Presets (preset()):
//   "qwen3-30b-a3b"  the published Qwen3-30B-A3B config (tests/data/qwen3-30b-a3b/config.json), 30.5 B params.
//   "tiny"           vocab 512, hidden 64, 4 layers (all MoE), 4 heads / 2 kv heads of head_dim 16 (GQA 2:1),
//                    8 experts top-2 of moe_intermediate 32, intermediate 96, norm_topk_prob, 4096 positions:
//                    0.31 M params, a forward pass takes milliseconds on one CPU core.
//   "tiny-chat"      "tiny" with Qwen3's vocabulary (151936) and special ids (eos <|im_end|> 151645 and
//                    <|endoftext|> 151643, bos 151643): served with the Qwen3 tokenizer (afd quickstart); 19.8 M
//                    params, nearly all in the embedding and the LM head.
//   "small"          vocab 8192, hidden 512, 8 layers (all MoE), 8 heads / 2 kv heads of head_dim 64 (GQA 4:1),
//                    32 experts top-4 of moe_intermediate 192 (the 30B model's 0.375 ratio to hidden),
//                    intermediate 1024, norm_topk_prob, 8192 positions: 89.3 M params (1.85 M active per layer
//                    and token), a CPU decode benchmark.
// All presets: rope_theta 1e6, rms_norm_eps 1e-6, bf16 weights, untied embeddings, no attention bias.
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
    int64_t head_dim = 0;  // independent of hidden_size / num_attention_heads
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    bool norm_topk_prob = true;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v/o projections carry a bias
    double rms_norm_eps = 1e-6;
    double rope_theta = 1e6;
    int64_t max_position_embeddings = 0;
    core::DType dtype = core::DType::kBf16;  // checkpoint weight dtype
    std::vector<int64_t> eos_token_ids;      // may be empty
    int64_t bos_token_id = -1;               // -1 when absent

    // HF rule: a layer is MoE iff it is not in mlp_only_layers, num_experts > 0 and
    // (layer + 1) % decoder_sparse_step == 0. Other layers run a dense SwiGLU MLP of intermediate_size.
    bool isMoeLayer(int64_t layer) const;
    int64_t numMoeLayers() const;
    int64_t qSize() const { return num_attention_heads * head_dim; }
    int64_t kvSize() const { return num_key_value_heads * head_dim; }
    // Total weights of the checkpoint (embedding, every layer, final norm, LM head unless tied). validate()
    // guarantees that this and every tensor's element count fit in int64_t.
    int64_t numParameters() const;

    bool operator==(const ModelConfig&) const = default;

    // Checks sizes and ratios (positive sizes, heads divisible by kv heads, top-k ≤ experts, layer indices in
    // range, even head_dim for RoPE, token ids inside the vocabulary …). Messages name the field and the rule.
    core::Status validate() const;

    // Parses config.json text; `source` (usually the path) prefixes every error. Calls validate().
    static core::Result<ModelConfig> fromJson(std::string_view text, std::string_view source);
    // Reads `path` (a config.json) and parses it; the errors name the path.
    static core::Result<ModelConfig> fromFile(const std::string& path);
    // Built-in shapes for `afd gen-model --preset`: "tiny", "tiny-chat", "small", "qwen3-30b-a3b".
    static core::Result<ModelConfig> preset(std::string_view name);
    static std::vector<std::string> presetNames();

    // config.json text in the hub form (what `afd gen-model` writes), parseable by transformers: every field
    // transformers reads, keys sorted, 2-space indent. eos_token_id is an int for one id, a list for several.
    std::string toJson() const;
};

}  // namespace afd::model
