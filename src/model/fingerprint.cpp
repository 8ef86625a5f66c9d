#include "model/fingerprint.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/weights.h"

namespace afd::model {
namespace {

constexpr size_t kSampleBytes = 4096;

void mix(uint64_t& h, const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;  // FNV-1a
}

}  // namespace

namespace {

std::string shapesOf(const ModelConfig& c) {
    return fmt::format("{} L{} H{} A{}x{}/{} E{}x{} K{} I{} S{} D[{}] N{} T{} B{} V{} e{} r{}", c.model_type,
                       c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.head_dim, c.num_key_value_heads,
                       c.num_experts, c.moe_intermediate_size, c.num_experts_per_tok, c.intermediate_size,
                       c.decoder_sparse_step, fmt::join(c.mlp_only_layers, ","), c.norm_topk_prob,
                       c.tie_word_embeddings, c.attention_bias, c.vocab_size, c.rms_norm_eps, c.rope_theta);
}

std::string summary(const ModelConfig& c, uint64_t h) {
    return fmt::format("{} L{} H{} E{}x{} K{} V{} #{:016x}", c.model_type, c.num_hidden_layers, c.hidden_size,
                       c.num_experts, c.moe_intermediate_size, c.num_experts_per_tok, c.vocab_size, h);
}

}  // namespace

core::Result<std::string> modelFingerprint(const ModelConfig& c, const Checkpoint& checkpoint) {
    const std::string shapes = shapesOf(c);
    uint64_t h = 0xcbf29ce484222325ull;
    mix(h, shapes.data(), shapes.size());
    std::vector<std::string> samples = {"model.norm.weight", "model.embed_tokens.weight"};
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
        if (!c.isMoeLayer(layer)) continue;
        samples.push_back(expertTensorName(layer, 0, "gate_proj"));
        samples.push_back(expertTensorName(layer, c.num_experts - 1, "down_proj"));
        break;
    }
    for (const auto& name : samples) {
        AFD_ASSIGN_OR_RETURN(core::Tensor t, checkpoint.tensor(name));
        mix(h, t.rawData(), std::min(t.nbytes(), kSampleBytes));
    }
    return summary(c, h);
}

std::string randomModelFingerprint(const ModelConfig& c, uint64_t seed) {
    const std::string shapes = shapesOf(c) + fmt::format(" random seed {}", seed);
    uint64_t h = 0xcbf29ce484222325ull;
    mix(h, shapes.data(), shapes.size());
    return summary(c, h) + fmt::format(" random:{}", seed);
}

}  // namespace afd::model
