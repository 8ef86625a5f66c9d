// The floors of `afd bench generate` (lab/decode_floor.h), against numbers worked out by hand from the model's shapes
// (no device needed).
#include <gtest/gtest.h>

// The lab is a CUDA lab: without the CUDA backend there is nothing to test here.
#if defined(AFD_HAVE_CUDA)

#include <cstdint>
#include <vector>

#include "lab/decode_floor.h"
#include "model/model_config.h"

namespace afd::lab {
namespace {

model::ModelConfig qwen3() { return model::ModelConfig::preset("qwen3-30b-a3b").value(); }

TEST(DecodeFloorTest, ExpectedDistinctExpertsUnderUniformRouting) {
    EXPECT_DOUBLE_EQ(expectedDistinctExperts(128, 8, 0), 0.0);
    EXPECT_DOUBLE_EQ(expectedDistinctExperts(128, 8, 1), 8.0);
    // Two tokens: 128 (1 - (120/128)^2) = 15.5.
    EXPECT_DOUBLE_EQ(expectedDistinctExperts(128, 8, 2), 15.5);
    EXPECT_NEAR(expectedDistinctExperts(128, 8, 64), 125.94, 0.01);  // 128 (1 - 0.9375^64)
    EXPECT_NEAR(expectedDistinctExperts(128, 8, 256), 128.0, 1e-4);
    EXPECT_DOUBLE_EQ(expectedDistinctExperts(8, 8, 1), 8.0);
}

TEST(DecodeFloorTest, CountsDistinctExpertsIgnoringIdsOutsideTheRange) {
    const std::vector<int32_t> ids{0, 5, 5, -1, 200, 3, 0, 7};
    EXPECT_EQ(countDistinctExperts(ids, 8), 4);  // 0, 3, 5, 7
    EXPECT_EQ(countDistinctExperts({}, 8), 0);
}

TEST(DecodeFloorTest, Qwen3BatchOneReadsItsEightExpertsPerLayerAndEveryOtherWeight) {
    const model::ModelConfig c = qwen3();
    EXPECT_DOUBLE_EQ(expertBytes(c), 9437184.0);  // 3 x 2048 x 768 BF16 (DESIGN.md §9)
    EXPECT_DOUBLE_EQ(kvBytesPerPosition(c), 48.0 * 2 * 4 * 128 * 2);
    const double positions = 1025.0;
    const DecodeStepBytes b = decodeStepBytes(c, 1, positions);
    EXPECT_DOUBLE_EQ(b.experts, 48.0 * 8 * 9437184.0);
    // q/k/v (5120 rows) and o (2048 x 4096) projections, input and post norms [2048], q and k norms [128].
    EXPECT_DOUBLE_EQ(b.attention_weights, 48.0 * (5120.0 * 2048 + 2048.0 * 4096 + 2 * 2048 + 2 * 128) * 2);
    EXPECT_DOUBLE_EQ(b.routers, 48.0 * 128 * 2048 * 2);
    EXPECT_DOUBLE_EQ(b.dense_mlp, 0.0);
    EXPECT_DOUBLE_EQ(b.lm_head, (151936.0 * 2048 + 2048 + 2048) * 2);
    EXPECT_DOUBLE_EQ(b.kv, (positions + 1) * kvBytesPerPosition(c));
    // About 6.2 GB: 1.4 ms at 4.3 TB/s.
    EXPECT_NEAR(b.total() / 1e9, 6.18, 0.01);
}

TEST(DecodeFloorTest, MeasuredExpertCountsReplaceTheUniformOnes) {
    model::ModelConfig c = qwen3();
    c.num_hidden_layers = 3;
    const std::vector<double> distinct{10, 20, 30};
    const DecodeStepBytes b = decodeStepBytes(c, 4, 4 * 100.0, distinct);
    EXPECT_DOUBLE_EQ(b.experts, 60.0 * expertBytes(c));
    EXPECT_THROW(decodeStepBytes(c, 4, 400.0, std::vector<double>{1, 2}), std::exception);
}

TEST(DecodeFloorTest, DenseLayersReadTheirWholeMlp) {
    model::ModelConfig c = qwen3();
    c.num_hidden_layers = 4;
    c.mlp_only_layers = {0, 2};
    const DecodeStepBytes b = decodeStepBytes(c, 1, 10.0);
    EXPECT_DOUBLE_EQ(b.dense_mlp, 2.0 * 3 * 2048 * 6144 * 2);
    EXPECT_DOUBLE_EQ(b.experts, 2.0 * 8 * expertBytes(c));
    EXPECT_DOUBLE_EQ(b.routers, 2.0 * 128 * 2048 * 2);
}

TEST(DecodeFloorTest, PrefillFlopsCountEveryTokensProjectionsExpertsAndCausalAttention) {
    model::ModelConfig c = qwen3();
    c.num_hidden_layers = 2;
    const int64_t T = 8;
    // Per token and layer: q/k/v and o projections, the router, 8 experts of 3 x 2048 x 768; two layers.
    const double per_token = 2 * 2 * (5120.0 * 2048 + 4096.0 * 2048 + 128.0 * 2048 + 8 * 3.0 * 2048 * 768);
    const double attention = 2 * 2 * (8.0 * 9 / 2) * 4096 * 2;  // q.k and p.v over 36 positions, 32 x 128 wide
    const double lm_head = 2.0 * 151936 * 2048;
    EXPECT_DOUBLE_EQ(prefillFlops(c, T), per_token * T + attention + lm_head);
}

}  // namespace
}  // namespace afd::lab
#endif  // AFD_HAVE_CUDA
