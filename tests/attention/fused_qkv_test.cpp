// The fused QKV projection built at load: its rows are the checkpoint's q/k/v rows, it is counted as owned memory,
// and one linearCpu over it equals the three separate projections bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/linear.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {
namespace {

const std::string kTinyModel = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

struct Loaded {
    model::ModelConfig config;
    model::Checkpoint checkpoint;
};

Loaded open() {
    auto config = model::ModelConfig::fromFile(kTinyModel + "/config.json");
    EXPECT_TRUE(config.isOk()) << config.status().toString();
    auto checkpoint = model::Checkpoint::open(kTinyModel);
    EXPECT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    return {std::move(config).value(), std::move(checkpoint).value()};
}

TEST(FusedQkv, LoadConcatenatesTheCheckpointRows) {
    const Loaded m = open();
    const model::ModelConfig& c = m.config;
    // Attention only (a p2p attention rank): the fused projections are the only owned copies.
    auto weights = model::loadWeights(m.checkpoint, c, model::WeightSelection::attentionRole(false));
    ASSERT_TRUE(weights.isOk()) << weights.status().toString();
    const int64_t H = c.hidden_size;
    const int64_t rows = c.qSize() + 2 * c.kvSize();
    uint64_t fused_bytes = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const auto& w = weights->attention[static_cast<size_t>(l)];
        ASSERT_EQ(w.qkv_proj.shape(), (core::Shape{rows, H}));
        ASSERT_EQ(w.qkv_proj.dtype(), core::DType::kBf16);
        ASSERT_TRUE(w.qkv_proj.isOwning());
        fused_bytes += w.qkv_proj.nbytes();
        int64_t row = 0;
        for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
            const std::string name = model::layerPrefix(l) + "self_attn." + proj + ".weight";
            const int64_t out = proj[0] == 'q' ? c.qSize() : c.kvSize();
            auto source = m.checkpoint.expect(name, core::DType::kBf16, {out, H});
            ASSERT_TRUE(source.isOk()) << source.status().toString();
            const auto* fused = static_cast<const uint8_t*>(w.qkv_proj.rawData()) + row * H * 2;
            EXPECT_EQ(std::memcmp(fused, source->rawData(), source->nbytes()), 0) << name;
            row += source->size(0);
        }
        EXPECT_EQ(row, rows);
        // The separate projections are views of the fused rows.
        EXPECT_EQ(w.q_proj.rawData(), w.qkv_proj.rawData());
        EXPECT_EQ(static_cast<const char*>(w.v_proj.rawData()),
                  static_cast<const char*>(w.qkv_proj.rawData()) + (c.qSize() + c.kvSize()) * H * 2);
        EXPECT_EQ(w.k_proj.shape(), (core::Shape{c.kvSize(), H}));
    }
    EXPECT_EQ(weights->owned_bytes, fused_bytes);
}

TEST(FusedQkv, OneProjectionEqualsThreeBitForBit) {
    const Loaded m = open();
    const model::ModelConfig& c = m.config;
    auto weights = model::loadWeights(m.checkpoint, c, model::WeightSelection::attentionRole(false));
    ASSERT_TRUE(weights.isOk()) << weights.status().toString();
    const auto& w = weights->attention[1];
    constexpr int64_t n = 7;
    const int64_t H = c.hidden_size;
    std::mt19937 rng(2);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * H));
    for (auto& v : x) v = dist(rng);
    const int64_t rows = c.qSize() + 2 * c.kvSize();
    std::vector<float> fused(static_cast<size_t>(n * rows));
    kernels::linearCpu({n, H, rows, x.data(), w.qkv_proj.data<core::Bf16>(), nullptr, fused.data()});
    // The separate projections from the checkpoint's own tensors.
    int64_t col = 0;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
        const std::string name = model::layerPrefix(1) + "self_attn." + proj + ".weight";
        const int64_t out = proj[0] == 'q' ? c.qSize() : c.kvSize();
        auto t = m.checkpoint.expect(name, core::DType::kBf16, {out, H});
        ASSERT_TRUE(t.isOk()) << t.status().toString();
        std::vector<float> y(static_cast<size_t>(n * out));
        kernels::linearCpu({n, H, out, x.data(), t->data<core::Bf16>(), nullptr, y.data()});
        for (int64_t r = 0; r < n; ++r) {
            EXPECT_EQ(std::memcmp(fused.data() + r * rows + col, y.data() + r * out, out * sizeof(float)), 0)
                << proj << " row " << r;
        }
        col += out;
    }
}

}  // namespace
}  // namespace afd::attention
