#include "model/synthetic.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/bf16.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "model/synthetic_values.h"
#include "model/weights.h"

namespace afd::model {
namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void fillTensor(const TensorPlan& plan, const SyntheticDistribution& dist, uint64_t seed, uint8_t* out, size_t nbytes) {
    auto* values = reinterpret_cast<uint16_t*>(out);
    const int64_t count = static_cast<int64_t>(nbytes / sizeof(uint16_t));
    const uint64_t key = syntheticTensorKey(plan.name, seed);
    constexpr int64_t kChunk = kSyntheticChunkElements;  // values do not depend on how chunks go to threads
    core::parallelFor((count + kChunk - 1) / kChunk, 1, [&](int64_t cb, int64_t ce) {
        const int64_t end = std::min(count, ce * kChunk);
        for (int64_t i = cb * kChunk; i < end; ++i) {
            values[i] = syntheticValueBits(key, i, dist.centre, dist.half_width);
        }
    });
}

core::Status writeText(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return core::ioError("cannot write {}", path.string());
    return core::Status::ok();
}

}  // namespace

uint64_t syntheticTensorKey(std::string_view name, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;  // FNV-1a, salted with the seed
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

SyntheticDistribution syntheticDistribution(std::string_view name, const core::Shape& shape) {
    if (endsWith(name, "norm.weight")) return {1.0f, 0.2f};  // every RMSNorm weight, q_norm/k_norm included
    if (endsWith(name, ".bias")) return {0.0f, 0.1f};
    if (name == "model.embed_tokens.weight") return {0.0f, 1.0f};
    // Linear weights [out, in]: uniform with variance 1/in keeps activations O(1) (std = half_width / sqrt(3)).
    const int64_t fan_in = shape.back();
    return {0.0f, static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)))};
}

std::vector<TensorPlan> checkpointPlan(const ModelConfig& c) {
    using core::DType;
    std::vector<TensorPlan> plans;
    const int64_t H = c.hidden_size;
    auto add = [&](std::string name, core::Shape shape) { plans.push_back({std::move(name), DType::kBf16, shape}); };
    add("model.embed_tokens.weight", {c.vocab_size, H});
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
        const std::string p = layerPrefix(layer);
        add(p + "input_layernorm.weight", {H});
        add(p + "self_attn.q_proj.weight", {c.qSize(), H});
        add(p + "self_attn.k_proj.weight", {c.kvSize(), H});
        add(p + "self_attn.v_proj.weight", {c.kvSize(), H});
        add(p + "self_attn.o_proj.weight", {H, c.qSize()});
        if (c.attention_bias) {
            add(p + "self_attn.q_proj.bias", {c.qSize()});
            add(p + "self_attn.k_proj.bias", {c.kvSize()});
            add(p + "self_attn.v_proj.bias", {c.kvSize()});
            add(p + "self_attn.o_proj.bias", {H});
        }
        add(p + "self_attn.q_norm.weight", {c.head_dim});
        add(p + "self_attn.k_norm.weight", {c.head_dim});
        add(p + "post_attention_layernorm.weight", {H});
        if (c.isMoeLayer(layer)) {
            add(p + "mlp.gate.weight", {c.num_experts, H});
            for (int64_t e = 0; e < c.num_experts; ++e) {
                add(expertTensorName(layer, e, "gate_proj"), {c.moe_intermediate_size, H});
                add(expertTensorName(layer, e, "up_proj"), {c.moe_intermediate_size, H});
                add(expertTensorName(layer, e, "down_proj"), {H, c.moe_intermediate_size});
            }
        } else {
            add(p + "mlp.gate_proj.weight", {c.intermediate_size, H});
            add(p + "mlp.up_proj.weight", {c.intermediate_size, H});
            add(p + "mlp.down_proj.weight", {H, c.intermediate_size});
        }
    }
    add("model.norm.weight", {H});
    if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, H});
    return plans;
}

core::Status writeSyntheticCheckpoint(const std::string& dir, const ModelConfig& config,
                                      const SyntheticOptions& options) {
    AFD_RETURN_IF_ERROR(config.validate());
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return core::ioError("cannot create directory {}: {}", dir, ec.message());
    CheckpointWriteOptions write_options;
    write_options.max_shard_bytes = options.max_shard_bytes;
    AFD_RETURN_IF_ERROR(writeCheckpoint(
        dir, checkpointPlan(config), write_options, [&](const TensorPlan& plan, uint8_t* out, size_t nbytes) {
            fillTensor(plan, syntheticDistribution(plan.name, plan.shape), options.seed, out, nbytes);
            return core::Status::ok();
        }));
    AFD_RETURN_IF_ERROR(writeText(std::filesystem::path(dir) / "config.json", config.toJson()));
    std::string generation = "{\n  \"do_sample\": false";
    if (config.bos_token_id >= 0) generation += fmt::format(",\n  \"bos_token_id\": {}", config.bos_token_id);
    if (!config.eos_token_ids.empty()) {
        generation += fmt::format(",\n  \"eos_token_id\": [{}]", fmt::join(config.eos_token_ids, ", "));
    }
    generation += "\n}\n";
    return writeText(std::filesystem::path(dir) / "generation_config.json", generation);
}

}  // namespace afd::model
