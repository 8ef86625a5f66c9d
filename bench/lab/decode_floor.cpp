#include "lab/decode_floor.h"

#include <cmath>
#include <vector>

#include "core/check.h"

namespace afd::lab {
namespace {

constexpr double kBf16Bytes = 2.0;

// Multiply-adds of one token through the projections of one layer's attention.
double attentionProjectionMacs(const model::ModelConfig& c) {
    const double H = static_cast<double>(c.hidden_size);
    return H * static_cast<double>(c.qSize() + 2 * c.kvSize()) + static_cast<double>(c.qSize()) * H;
}

}  // namespace

double expectedDistinctExperts(int64_t experts, int64_t top_k, int64_t tokens) {
    if (experts <= 0 || tokens <= 0) return 0.0;
    const double miss = 1.0 - static_cast<double>(top_k) / static_cast<double>(experts);
    return static_cast<double>(experts) * (1.0 - std::pow(miss, static_cast<double>(tokens)));
}

int64_t countDistinctExperts(std::span<const int32_t> ids, int64_t experts) {
    std::vector<uint8_t> seen(static_cast<size_t>(std::max<int64_t>(experts, 0)), 0);
    int64_t distinct = 0;
    for (const int32_t e : ids) {
        if (e < 0 || e >= experts || seen[static_cast<size_t>(e)]) continue;
        seen[static_cast<size_t>(e)] = 1;
        ++distinct;
    }
    return distinct;
}

double expertBytes(const model::ModelConfig& c) {
    return 3.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.moe_intermediate_size) * kBf16Bytes;
}

double kvBytesPerPosition(const model::ModelConfig& c) {
    return 2.0 * static_cast<double>(c.num_hidden_layers * c.num_key_value_heads * c.head_dim) * kBf16Bytes;
}

DecodeStepBytes decodeStepBytes(const model::ModelConfig& c, int64_t batch, double kv_positions,
                                std::span<const double> distinct_experts) {
    AFD_CHECK(distinct_experts.empty() || static_cast<int64_t>(distinct_experts.size()) == c.numMoeLayers(),
              "decodeStepBytes: {} distinct counts for {} MoE layers", distinct_experts.size(), c.numMoeLayers());
    const double H = static_cast<double>(c.hidden_size);
    const double uniform = expectedDistinctExperts(c.num_experts, c.num_experts_per_tok, batch);
    DecodeStepBytes b;
    size_t moe_layer = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const double biases = c.attention_bias ? static_cast<double>(2 * c.qSize() + 2 * c.kvSize()) : 0.0;
        b.attention_weights += (attentionProjectionMacs(c) + biases + 2.0 * H + 2.0 * c.head_dim) * kBf16Bytes;
        if (c.isMoeLayer(l)) {
            const double distinct = distinct_experts.empty() ? uniform : distinct_experts[moe_layer];
            ++moe_layer;
            b.experts += distinct * expertBytes(c);
            b.routers += static_cast<double>(c.num_experts) * H * kBf16Bytes;
        } else {
            b.dense_mlp += 3.0 * H * static_cast<double>(c.intermediate_size) * kBf16Bytes;
        }
    }
    b.lm_head = (static_cast<double>(c.vocab_size) * H + H + static_cast<double>(batch) * H) * kBf16Bytes;
    b.kv = (kv_positions + static_cast<double>(batch)) * kvBytesPerPosition(c);
    return b;
}

double prefillFlops(const model::ModelConfig& c, int64_t tokens) {
    const double T = static_cast<double>(tokens);
    const double H = static_cast<double>(c.hidden_size);
    double macs_per_token = 0.0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        macs_per_token += attentionProjectionMacs(c);
        if (c.isMoeLayer(l)) {
            macs_per_token += static_cast<double>(c.num_experts) * H;  // the router
            macs_per_token +=
                static_cast<double>(c.num_experts_per_tok) * 3.0 * H * static_cast<double>(c.moe_intermediate_size);
        } else {
            macs_per_token += 3.0 * H * static_cast<double>(c.intermediate_size);
        }
    }
    // Causal attention: query row t reads t + 1 positions, for q·k and p·v over every query head.
    const double positions_read = T * (T + 1.0) / 2.0;
    const double attention_macs =
        2.0 * positions_read * static_cast<double>(c.qSize()) * static_cast<double>(c.num_hidden_layers);
    const double lm_head_macs = static_cast<double>(c.vocab_size) * H;
    return 2.0 * (macs_per_token * T + attention_macs + lm_head_macs);
}

}  // namespace afd::lab
