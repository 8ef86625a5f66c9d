// The synthetic generator's element formula (model/synthetic_values.h), which GPU-drawn weights share: the same
// values as one splitmix64 stream per 2^16-element chunk drawn in order (the generator's definition, written out
// independently here), what writeSyntheticCheckpoint stores, and the distributions per tensor kind.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/subprocess_util.h"
#include "core/bf16.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "model/synthetic_values.h"

namespace afd::model {
namespace {

// Element `index` by walking its chunk's stream from the start, as the generator was first defined.
uint16_t sequentialValue(uint64_t key, int64_t index, float centre, float half_width) {
    const int64_t chunk = index / (int64_t{1} << 16);
    uint64_t state = key ^ (static_cast<uint64_t>(chunk) * 0xd1b54a32d192ed03ull);
    uint64_t z = 0;
    for (int64_t i = chunk << 16; i <= index; ++i) {
        z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
    }
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    return core::floatToBf16Bits(centre + static_cast<float>(u) * half_width);
}

TEST(SyntheticValues, ClosedFormEqualsTheSequentialStream) {
    const uint64_t key = syntheticTensorKey("model.layers.3.self_attn.q_proj.weight", 7);
    for (const int64_t i : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{65535}, int64_t{65536}, int64_t{65537},
                            int64_t{200000}, int64_t{(int64_t{1} << 20) + 5}}) {
        EXPECT_EQ(syntheticValueBits(key, i, 0.0f, 0.05f), sequentialValue(key, i, 0.0f, 0.05f)) << i;
        EXPECT_EQ(syntheticValueBits(key, i, 1.0f, 0.2f), sequentialValue(key, i, 1.0f, 0.2f)) << i;
    }
}

TEST(SyntheticValues, CheckpointHoldsTheFormulasValues) {
    const ModelConfig config = ModelConfig::preset("tiny").value();
    testing::TempDir dir;
    SyntheticOptions options;
    options.seed = 42;
    ASSERT_TRUE(writeSyntheticCheckpoint(dir.path(), config, options).isOk());
    const Checkpoint checkpoint = Checkpoint::open(dir.path()).value();
    for (const std::string name : {"model.embed_tokens.weight", "model.layers.1.input_layernorm.weight",
                                   "model.layers.0.self_attn.k_proj.weight",
                                   "model.layers.2.mlp.experts.5.down_proj.weight", "lm_head.weight"}) {
        SCOPED_TRACE(name);
        const core::Tensor t = checkpoint.tensor(name).value();
        const SyntheticDistribution dist = syntheticDistribution(name, t.shape());
        const uint64_t key = syntheticTensorKey(name, options.seed);
        const auto* bits = static_cast<const uint16_t*>(t.rawData());
        int64_t wrong = 0;
        for (int64_t i = 0; i < t.numel(); ++i) {
            wrong += bits[i] != syntheticValueBits(key, i, dist.centre, dist.half_width);
        }
        EXPECT_EQ(wrong, 0);
    }
}

TEST(SyntheticValues, DistributionsPerTensorKind) {
    EXPECT_EQ(syntheticDistribution("model.norm.weight", {64}).centre, 1.0f);
    EXPECT_EQ(syntheticDistribution("model.layers.0.self_attn.q_norm.weight", {16}).half_width, 0.2f);
    EXPECT_EQ(syntheticDistribution("model.layers.0.self_attn.q_proj.bias", {64}).half_width, 0.1f);
    EXPECT_EQ(syntheticDistribution("model.embed_tokens.weight", {512, 64}).half_width, 1.0f);
    const SyntheticDistribution down = syntheticDistribution("model.layers.0.mlp.experts.0.down_proj.weight", {64, 32});
    EXPECT_EQ(down.centre, 0.0f);
    EXPECT_FLOAT_EQ(down.half_width, std::sqrt(3.0f / 32.0f));  // fan-in: the last axis
    EXPECT_NE(syntheticTensorKey("a", 1), syntheticTensorKey("a", 2));
    EXPECT_NE(syntheticTensorKey("a", 1), syntheticTensorKey("b", 1));
}

}  // namespace
}  // namespace afd::model
