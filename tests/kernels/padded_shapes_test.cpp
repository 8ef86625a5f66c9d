// The widths the CUDA kernels store a small model's shapes at, on the host (no GPU): the packed MLP width
// (moe_cuda.h, moePackedWidth: a multiple of 32, the real model's 768 unchanged) and the stored attention head_dim
// (paged_attention_cuda.h, pagedAttentionHeadDim: the kernels' own head_dims unchanged, an even smaller one padded up
// to the next of them, any other returned as it is for the kernels to refuse).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/moe_cuda.h"
#include "kernels/paged_attention_cuda.h"

namespace afd::kernels {
namespace {

TEST(PaddedShapesTest, PackedMlpWidthIsTheNextMultipleOf32) {
    EXPECT_EQ(moePackedWidth(0), 0);  // a layer without MLP weights
    EXPECT_EQ(moePackedWidth(1), 32);
    EXPECT_EQ(moePackedWidth(7), 32);
    EXPECT_EQ(moePackedWidth(16), 32);  // hf_crosscheck's experts64_top8
    EXPECT_EQ(moePackedWidth(32), 32);
    EXPECT_EQ(moePackedWidth(44), 64);
    EXPECT_EQ(moePackedWidth(96), 96);
    EXPECT_EQ(moePackedWidth(768), 768);  // Qwen3-30B-A3B: no padding
    EXPECT_EQ(moePackedWidth(6144), 6144);
    static_assert(moePackedWidth(16) == 32, "usable in constant expressions");
}

TEST(PaddedShapesTest, StoredHeadDimIsTheNextOneTheKernelsTake) {
    for (const int64_t taken : {16, 32, 64, 128, 256}) EXPECT_EQ(pagedAttentionHeadDim(taken), taken);
    EXPECT_EQ(pagedAttentionHeadDim(2), 16);
    EXPECT_EQ(pagedAttentionHeadDim(4), 16);
    EXPECT_EQ(pagedAttentionHeadDim(8), 16);  // hf_crosscheck's mha_headdim8
    EXPECT_EQ(pagedAttentionHeadDim(24), 32);
    EXPECT_EQ(pagedAttentionHeadDim(80), 128);
    EXPECT_EQ(pagedAttentionHeadDim(200), 256);
    // Nothing to pad to: returned as they are, which the kernels refuse.
    EXPECT_EQ(pagedAttentionHeadDim(7), 7);  // odd: no rotate-half pairs
    EXPECT_EQ(pagedAttentionHeadDim(0), 0);
    EXPECT_EQ(pagedAttentionHeadDim(512), 512);
    EXPECT_EQ(pagedAttentionHeadDim(258), 258);
}

}  // namespace
}  // namespace afd::kernels
