// The host-side argument checks of the attention side's device ops (dense_cuda.h, sampling_cuda.h): each bad shape,
// null or misaligned pointer is rejected with a message that names the rule, before any CUDA call, so these run
// without a GPU. Empty calls (no tokens, no rows) are accepted and launch nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/check.h"
#include "kernels/dense_cuda.h"
#include "kernels/sampling_cuda.h"

namespace afd::kernels {
namespace {

using testing::HasSubstr;

// A fake device address, 16-byte aligned unless `misalign` is given; never dereferenced (every call below throws
// before it launches anything).
template <typename T>
T* fake(uintptr_t misalign = 0) {
    return reinterpret_cast<T*>(uintptr_t{0x10000} + misalign);
}

void expectRejected(const std::function<void()>& call, const std::string& fragment) {
    try {
        call();
        ADD_FAILURE() << "accepted; expected an error containing '" << fragment << "'";
    } catch (const core::Error& e) {
        EXPECT_THAT(std::string(e.what()), HasSubstr(fragment));
    }
}

QkvRopeParams validQkv() {
    QkvRopeParams p;
    p.num_tokens = 4;
    p.num_heads = 32;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.qkv = fake<core::Bf16>();
    p.positions = fake<int32_t>();
    p.rope_cos = fake<float>();
    p.rope_sin = fake<float>();
    p.max_position = 4096;
    p.slot_mapping = fake<int32_t>();
    p.num_blocks = 8;
    p.block_size = 16;
    p.q_out = fake<core::Bf16>();
    p.k_cache = fake<core::Bf16>();
    p.v_cache = fake<core::Bf16>();
    return p;
}

TEST(DenseOpsArgsTest, QkvRopeRejectsBadShapesAndPointers) {
    for (const int64_t hd : {int64_t{0}, int64_t{8}, int64_t{48}, int64_t{96}, int64_t{512}}) {
        QkvRopeParams p = validQkv();
        p.head_dim = hd;
        expectRejected([&] { qkvRopeCuda(p, nullptr); },
                       "head_dim " + std::to_string(hd) + " is not one of 16, 32, 64, 128, 256");
    }
    // The model's head_dim in padded heads: even, and within the stored head_dim.
    for (const int64_t rd : {int64_t{7}, int64_t{256}, int64_t{-2}}) {
        QkvRopeParams p = validQkv();
        p.rope_dim = rd;
        expectRejected([&] { qkvRopeCuda(p, nullptr); },
                       "rope_dim " + std::to_string(rd) + " must be even and in [2, head_dim 128]");
    }
    QkvRopeParams p = validQkv();
    p.num_heads = 30;
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "must be a positive multiple of num_kv_heads");
    p = validQkv();
    p.block_size = 0;
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "block_size 0 outside [1, 1024]");
    p = validQkv();
    p.max_position = 0;
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "max_position 0 < 1");
    p = validQkv();
    p.q_out = nullptr;
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "must not be null");
    p = validQkv();
    p.qkv = fake<core::Bf16>(2);
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "16-byte aligned");
    p = validQkv();
    p.rope_sin = fake<float>(4);
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "16-byte aligned");
    p = validQkv();
    p.num_tokens = -1;
    expectRejected([&] { qkvRopeCuda(p, nullptr); }, "num_tokens -1");
    // No tokens: nothing to check in the pointers, nothing launched.
    QkvRopeParams empty = validQkv();
    empty.num_tokens = 0;
    empty.qkv = nullptr;
    EXPECT_NO_THROW(qkvRopeCuda(empty, nullptr));
}

AddRmsNormParams validNorm() {
    AddRmsNormParams p;
    p.num_tokens = 3;
    p.hidden = 2048;
    p.residual = fake<float>();
    p.weight = fake<core::Bf16>();
    p.out = fake<core::Bf16>();
    return p;
}

TEST(DenseOpsArgsTest, AddRmsNormRejectsBadShapesAndPointers) {
    AddRmsNormParams p = validNorm();
    p.hidden = 12;
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "hidden 12 must be a positive multiple of 8");
    p.hidden = kMaxAddRmsNormHidden + 8;
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "must be a positive multiple of 8 up to");
    p = validNorm();
    p.rows = fake<int32_t>();
    p.num_rows = 2;
    p.delta = fake<core::Bf16>();
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "takes no delta");
    p = validNorm();
    p.bias = fake<core::Bf16>();
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "a bias needs a delta");
    p = validNorm();
    p.weight = nullptr;
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "must not be null");
    p = validNorm();
    p.residual = fake<float>(8);
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "16-byte aligned");
    p = validNorm();
    p.delta = fake<float>(4);
    p.delta_dtype = ActDType::kF32;
    expectRejected([&] { addRmsNormCuda(p, nullptr); }, "16-byte aligned");
    AddRmsNormParams empty = validNorm();
    empty.num_tokens = 0;
    empty.residual = nullptr;
    EXPECT_NO_THROW(addRmsNormCuda(empty, nullptr));
}

TEST(DenseOpsArgsTest, EmbeddingCastAndMaskRejectBadArguments) {
    EmbeddingParams e{2, 384, 64, fake<int32_t>(), fake<core::Bf16>(), fake<float>()};
    EmbeddingParams bad = e;
    bad.hidden = 10;
    expectRejected([&] { embeddingCuda(bad, nullptr); }, "hidden 10 must be a positive multiple of 8");
    bad = e;
    bad.ids = nullptr;
    expectRejected([&] { embeddingCuda(bad, nullptr); }, "must not be null");
    bad = e;
    bad.out = fake<float>(4);
    expectRejected([&] { embeddingCuda(bad, nullptr); }, "16-byte aligned");
    bad = e;
    bad.vocab_size = 0;
    expectRejected([&] { embeddingCuda(bad, nullptr); }, "vocab_size 0");

    CastParams c{100, ActDType::kBf16, ActDType::kF32, fake<void>(), fake<void>(64)};
    expectRejected([&] { castCuda(c, nullptr); }, "in and out overlap");
    c.out = fake<void>(8);
    expectRejected([&] { castCuda(c, nullptr); }, "16-byte aligned");
    c.out = nullptr;
    expectRejected([&] { castCuda(c, nullptr); }, "must not be null");
    c.count = -1;
    expectRejected([&] { castCuda(c, nullptr); }, "count -1 < 0");

    MaskPaddedRowsParams m{16, 0, fake<int32_t>(), fake<int32_t>(), fake<float>()};
    expectRejected([&] { maskPaddedRowsCuda(m, nullptr); }, "top_k 0 < 1");
    m.top_k = 8;
    m.num_valid = nullptr;
    expectRejected([&] { maskPaddedRowsCuda(m, nullptr); }, "must not be null");
}

TEST(DenseOpsArgsTest, SamplingRejectsBadArguments) {
    SampleTokensParams p;
    p.num_rows = 4;
    p.vocab_size = 151936;
    p.logits = fake<float>();
    p.out_ids = fake<int32_t>();
    SampleTokensParams bad = p;
    bad.vocab_size = 0;
    expectRejected([&] { sampleTokensCuda(bad, nullptr); }, "vocab_size 0 outside [1,");
    bad.vocab_size = kMaxSampleVocab + 1;
    expectRejected([&] { sampleTokensCuda(bad, nullptr); }, "outside [1,");
    bad = p;
    bad.logits = nullptr;
    expectRejected([&] { sampleTokensCuda(bad, nullptr); }, "must not be null");
    bad = p;
    bad.logits = fake<float>(2);
    expectRejected([&] { sampleTokensCuda(bad, nullptr); }, "4-byte aligned");
    bad = p;
    bad.num_rows = -2;
    expectRejected([&] { sampleTokensCuda(bad, nullptr); }, "num_rows -2 < 0");
    SampleTokensParams empty = p;
    empty.num_rows = 0;
    empty.logits = nullptr;
    EXPECT_NO_THROW(sampleTokensCuda(empty, nullptr));
}

TEST(DenseOpsArgsTest, SamplingUniformIsTheSameCounterHashEverywhere) {
    // Fixed values: a change of the hash changes every seeded request's ids.
    EXPECT_EQ(samplingMix64(1), 6238072747940578789ull);
    const double a = samplingUniform(123, 7);
    EXPECT_EQ(a, 0.98042105655887368);
    EXPECT_GE(a, 0.0);
    EXPECT_LT(a, 1.0);
    EXPECT_EQ(a, samplingUniform(123, 7));
    EXPECT_NE(a, samplingUniform(123, 8));
    EXPECT_NE(a, samplingUniform(124, 7));
    // Roughly uniform over many offsets.
    double sum = 0.0;
    for (uint64_t i = 0; i < 100000; ++i) {
        sum += samplingUniform(42, i);
    }
    EXPECT_NEAR(sum / 100000.0, 0.5, 0.005);
}

}  // namespace
}  // namespace afd::kernels
