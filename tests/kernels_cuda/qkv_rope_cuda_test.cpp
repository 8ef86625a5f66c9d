// Harness of the QKV post-processing (bias, per-head RMSNorm, RoPE, paged KV write) against the CPU model runner's
// order of the same CPU kernels (rmsNormCpu per head, ropeTableCpu + applyRopeCpu), on fresh random inputs with q_out
// and both caches poisoned: q, k and v within bf16 tolerance, every q element written, and every cache slot that no
// token maps to (padding rows with slot -1, slots outside the cache, tokens with a position outside the rope table)
// still poisoned. Shapes: Qwen3-30B-A3B (32 q / 4 kv heads, head_dim 128), the tiny fixture (4 / 2, head_dim 16),
// and head_dim 32, 64, 256 with and without bias and norms, block sizes 16 to 128. Padded heads (rope_dim below the
// stored head_dim: 8 in 16, 2 in 16, 24 in 32, 48 in 64), from BF16 and FP32 projections whose padded lanes hold
// garbage: the model's lanes as the reference of a model of head_dim rope_dim, the other lanes of q and of every
// written k and v exactly zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/dense_cuda.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

constexpr double kBf16Tolerance = 1e-2;
constexpr uint16_t kPoisonBits = 0xFFFF;

struct QkvCase {
    int64_t tokens, heads, kv_heads, head_dim, block_size, num_blocks;
    bool bias, norms;
};

struct QkvReference {
    std::vector<float> q;  // [T, nh, hd]
    std::vector<float> k;  // [T, nkv, hd]
    std::vector<float> v;  // [T, nkv, hd]
};

// The CPU model runner's order per token: bias, then RMSNorm per head, then RoPE.
QkvReference referenceQkv(const QkvCase& c, const std::vector<core::Bf16>& qkv, const std::vector<core::Bf16>& bias,
                          const std::vector<core::Bf16>& q_norm, const std::vector<core::Bf16>& k_norm,
                          const std::vector<int32_t>& positions, double theta, float eps) {
    const int64_t hd = c.head_dim;
    const int64_t width = (c.heads + 2 * c.kv_heads) * hd;
    QkvReference r;
    r.q.resize(static_cast<size_t>(c.tokens * c.heads * hd));
    r.k.resize(static_cast<size_t>(c.tokens * c.kv_heads * hd));
    r.v.resize(r.k.size());
    std::vector<float> row(static_cast<size_t>(width));
    std::vector<float> cos(static_cast<size_t>(hd / 2));
    std::vector<float> sin(cos.size());
    for (int64_t t = 0; t < c.tokens; ++t) {
        for (int64_t i = 0; i < width; ++i) {
            row[static_cast<size_t>(i)] = qkv[static_cast<size_t>(t * width + i)].toFloat() +
                                          (c.bias ? bias[static_cast<size_t>(i)].toFloat() : 0.0f);
        }
        float* q = row.data();
        float* k = row.data() + c.heads * hd;
        const float* v = row.data() + (c.heads + c.kv_heads) * hd;
        if (c.norms) {
            rmsNormCpu({c.heads, hd, eps, q, q_norm.data(), q});
            rmsNormCpu({c.kv_heads, hd, eps, k, k_norm.data(), k});
        }
        ropeTableCpu(&positions[static_cast<size_t>(t)], 1, hd, theta, cos.data(), sin.data());
        applyRopeCpu({1, c.heads, hd, cos.data(), sin.data(), q});
        applyRopeCpu({1, c.kv_heads, hd, cos.data(), sin.data(), k});
        std::copy(q, q + c.heads * hd, r.q.begin() + t * c.heads * hd);
        std::copy(k, k + c.kv_heads * hd, r.k.begin() + t * c.kv_heads * hd);
        std::copy(v, v + c.kv_heads * hd, r.v.begin() + t * c.kv_heads * hd);
    }
    return r;
}

TEST(QkvRopeCudaTest, MatchesCpuAndWritesOnlyMappedSlots) {
    AFD_REQUIRE_SM90();
    const std::vector<QkvCase> cases = {
        {24, 32, 4, 128, 16, 8, false, true},    // Qwen3-30B-A3B
        {700, 32, 4, 128, 16, 64, false, true},  // a prefill chunk of it
        {13, 4, 2, 16, 16, 4, false, true},      // the tiny fixture
        {9, 8, 8, 32, 32, 2, true, true},       {10, 16, 2, 64, 64, 1, true, false},
        {7, 16, 4, 256, 128, 1, true, true},    {1, 4, 1, 64, 16, 3, false, true},
    };
    std::mt19937 rng(21);
    const double theta = 1e6;
    const float eps = 1e-6f;
    const int64_t max_position = 4096;
    for (const QkvCase& c : cases) {
        SCOPED_TRACE(testing::Message() << "T " << c.tokens << " nh " << c.heads << " nkv " << c.kv_heads << " hd "
                                        << c.head_dim << " block " << c.block_size << " bias " << c.bias << " norms "
                                        << c.norms);
        const int64_t hd = c.head_dim;
        const int64_t width = (c.heads + 2 * c.kv_heads) * hd;
        const int64_t slots = c.num_blocks * c.block_size;
        ASSERT_GE(slots, c.tokens);
        const auto qkv = test::randomBf16(static_cast<size_t>(c.tokens * width), 2.0f, rng);
        const auto bias = test::randomBf16(static_cast<size_t>(width), 0.5f, rng);
        const auto q_norm = test::randomBf16(static_cast<size_t>(hd), 1.5f, rng);
        const auto k_norm = test::randomBf16(static_cast<size_t>(hd), 1.5f, rng);

        std::uniform_int_distribution<int32_t> any_position(0, static_cast<int32_t>(max_position - 1));
        std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
        for (auto& pos : positions) {
            pos = any_position(rng);
        }
        std::vector<int32_t> free_slots(static_cast<size_t>(slots));
        std::iota(free_slots.begin(), free_slots.end(), 0);
        std::shuffle(free_slots.begin(), free_slots.end(), rng);
        std::vector<int32_t> slot_mapping(free_slots.begin(), free_slots.begin() + c.tokens);
        // Tokens that must not be written: padding (-1), a slot past the cache, a position past the rope table.
        std::vector<bool> written(slot_mapping.size(), true);
        std::vector<bool> position_valid(slot_mapping.size(), true);
        if (c.tokens >= 4) {
            slot_mapping[1] = -1;
            written[1] = false;
            slot_mapping[2] = static_cast<int32_t>(slots);
            written[2] = false;
            positions[3] = static_cast<int32_t>(max_position);
            written[3] = false;
            position_valid[3] = false;
        }
        std::vector<int32_t> ref_positions = positions;
        for (size_t t = 0; t < positions.size(); ++t) {
            if (!position_valid[t]) {
                ref_positions[t] = 0;
            }
        }
        const QkvReference ref = referenceQkv(c, qkv, bias, q_norm, k_norm, ref_positions, theta, eps);

        std::vector<int32_t> table_positions(static_cast<size_t>(max_position));
        std::iota(table_positions.begin(), table_positions.end(), 0);
        std::vector<float> cos_table(static_cast<size_t>(max_position * hd / 2));
        std::vector<float> sin_table(cos_table.size());
        ropeTableCpu(table_positions.data(), max_position, hd, theta, cos_table.data(), sin_table.data());

        DeviceBuffer d_qkv = DeviceBuffer::from(qkv);
        DeviceBuffer d_bias = DeviceBuffer::from(bias);
        DeviceBuffer d_q_norm = DeviceBuffer::from(q_norm);
        DeviceBuffer d_k_norm = DeviceBuffer::from(k_norm);
        DeviceBuffer d_positions = DeviceBuffer::from(positions);
        DeviceBuffer d_slots = DeviceBuffer::from(slot_mapping);
        DeviceBuffer d_cos = DeviceBuffer::from(cos_table);
        DeviceBuffer d_sin = DeviceBuffer::from(sin_table);
        const size_t cache_elems = static_cast<size_t>(slots * c.kv_heads * hd);
        DeviceBuffer d_q(static_cast<size_t>(c.tokens * c.heads * hd) * 2);
        DeviceBuffer d_k_cache(cache_elems * 2);
        DeviceBuffer d_v_cache(cache_elems * 2);
        d_q.poison();
        d_k_cache.poison();
        d_v_cache.poison();

        QkvRopeParams p;
        p.num_tokens = c.tokens;
        p.num_heads = c.heads;
        p.num_kv_heads = c.kv_heads;
        p.head_dim = hd;
        p.eps = eps;
        p.qkv = d_qkv.as<core::Bf16>();
        p.qkv_bias = c.bias ? d_bias.as<core::Bf16>() : nullptr;
        p.q_norm = c.norms ? d_q_norm.as<core::Bf16>() : nullptr;
        p.k_norm = c.norms ? d_k_norm.as<core::Bf16>() : nullptr;
        p.positions = d_positions.as<int32_t>();
        p.rope_cos = d_cos.as<float>();
        p.rope_sin = d_sin.as<float>();
        p.max_position = max_position;
        p.slot_mapping = d_slots.as<int32_t>();
        p.num_blocks = c.num_blocks;
        p.block_size = c.block_size;
        p.q_out = d_q.as<core::Bf16>();
        p.k_cache = d_k_cache.as<core::Bf16>();
        p.v_cache = d_v_cache.as<core::Bf16>();
        qkvRopeCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());

        auto q_got = test::toFloat(d_q.download<core::Bf16>(ref.q.size()));
        for (float e : q_got) {
            ASSERT_TRUE(std::isfinite(e)) << "a q element was not written";
        }
        std::vector<float> q_want = ref.q;
        for (int64_t t = 0; t < c.tokens; ++t) {
            if (!position_valid[static_cast<size_t>(t)]) {
                for (int64_t i = 0; i < c.heads * hd; ++i) {
                    ASSERT_EQ(q_got[static_cast<size_t>(t * c.heads * hd + i)], 0.0f) << "token " << t;
                }
                std::fill(q_want.begin() + t * c.heads * hd, q_want.begin() + (t + 1) * c.heads * hd, 0.0f);
            }
        }
        EXPECT_LT(test::relativeL2(q_got, q_want), kBf16Tolerance);

        const auto k_cache = d_k_cache.download<core::Bf16>(cache_elems);
        const auto v_cache = d_v_cache.download<core::Bf16>(cache_elems);
        const int64_t slot_elems = c.kv_heads * hd;
        std::vector<bool> slot_written(static_cast<size_t>(slots), false);
        std::vector<float> k_got, k_want, v_got, v_want;
        for (int64_t t = 0; t < c.tokens; ++t) {
            if (!written[static_cast<size_t>(t)]) {
                continue;
            }
            const int64_t slot = slot_mapping[static_cast<size_t>(t)];
            slot_written[static_cast<size_t>(slot)] = true;
            for (int64_t i = 0; i < slot_elems; ++i) {
                k_got.push_back(k_cache[static_cast<size_t>(slot * slot_elems + i)].toFloat());
                v_got.push_back(v_cache[static_cast<size_t>(slot * slot_elems + i)].toFloat());
                k_want.push_back(ref.k[static_cast<size_t>(t * slot_elems + i)]);
                v_want.push_back(ref.v[static_cast<size_t>(t * slot_elems + i)]);
            }
        }
        EXPECT_LT(test::relativeL2(k_got, k_want), kBf16Tolerance);
        EXPECT_LT(test::relativeL2(v_got, v_want), kBf16Tolerance);
        for (int64_t slot = 0; slot < slots; ++slot) {
            if (slot_written[static_cast<size_t>(slot)]) {
                continue;
            }
            for (int64_t i = 0; i < slot_elems; ++i) {
                ASSERT_EQ(k_cache[static_cast<size_t>(slot * slot_elems + i)].bits, kPoisonBits)
                    << "k written at unmapped slot " << slot;
                ASSERT_EQ(v_cache[static_cast<size_t>(slot * slot_elems + i)].bits, kPoisonBits)
                    << "v written at unmapped slot " << slot;
            }
        }
    }
}

struct PaddedCase {
    int64_t tokens, heads, kv_heads, head_dim, rope_dim;
    bool bias, norms, f32_in;
};

TEST(QkvRopeCudaTest, PaddedHeadsComputeTheModelsLanesAndZeroTheRest) {
    AFD_REQUIRE_SM90();
    const std::vector<PaddedCase> cases = {
        {11, 8, 8, 16, 8, false, true, true},    // hf_crosscheck's mha_headdim8, FP32 projection (the engine's)
        {9, 8, 1, 16, 8, true, true, false},     // GQA 8:1 at head_dim 8, bias, BF16 projection
        {5, 4, 2, 16, 2, true, false, true},     // the smallest head, no norms
        {7, 6, 3, 32, 24, true, true, true},     // 24 in 32
        {300, 4, 4, 64, 48, false, true, true},  // 48 in 64, a prefill chunk
    };
    std::mt19937 rng(29);
    const double theta = 1e4;
    const float eps = 1e-6f;
    const int64_t max_position = 512;
    const int64_t block_size = 16;
    for (const PaddedCase& c : cases) {
        SCOPED_TRACE(testing::Message() << "T " << c.tokens << " nh " << c.heads << " nkv " << c.kv_heads << " hd "
                                        << c.head_dim << " rope_dim " << c.rope_dim << " bias " << c.bias << " norms "
                                        << c.norms << " f32 " << c.f32_in);
        const int64_t hs = c.head_dim;
        const int64_t rd = c.rope_dim;
        const int64_t heads = c.heads + 2 * c.kv_heads;
        const int64_t num_blocks = (c.tokens + 1 + block_size - 1) / block_size + 1;
        const int64_t slots = num_blocks * block_size;
        // Every stored lane random, the padded ones too: the kernel must neither read nor pass them on.
        const auto qkv = test::randomBf16(static_cast<size_t>(c.tokens * heads * hs), 2.0f, rng);
        const auto bias = test::randomBf16(static_cast<size_t>(heads * hs), 0.5f, rng);
        const auto q_norm = test::randomBf16(static_cast<size_t>(hs), 1.5f, rng);
        const auto k_norm = test::randomBf16(static_cast<size_t>(hs), 1.5f, rng);
        // The model's tensors: the first rd lanes of each head.
        auto narrow = [&](const std::vector<core::Bf16>& v, int64_t runs) {
            std::vector<core::Bf16> out;
            for (int64_t r = 0; r < runs; ++r) out.insert(out.end(), v.begin() + r * hs, v.begin() + r * hs + rd);
            return out;
        };
        std::uniform_int_distribution<int32_t> any_position(0, static_cast<int32_t>(max_position - 1));
        std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
        for (auto& pos : positions) pos = any_position(rng);
        std::vector<int32_t> free_slots(static_cast<size_t>(slots));
        std::iota(free_slots.begin(), free_slots.end(), 0);
        std::shuffle(free_slots.begin(), free_slots.end(), rng);
        std::vector<int32_t> slot_mapping(free_slots.begin(), free_slots.begin() + c.tokens);
        // Token 1 is padding (no KV write), token 2's position is past the table (q zero, no KV write).
        slot_mapping[1] = -1;
        positions[2] = static_cast<int32_t>(max_position);
        std::vector<int32_t> ref_positions = positions;
        ref_positions[2] = 0;
        const QkvCase model{c.tokens, c.heads, c.kv_heads, rd, block_size, num_blocks, c.bias, c.norms};
        const QkvReference ref = referenceQkv(model, narrow(qkv, c.tokens * heads), narrow(bias, heads),
                                              narrow(q_norm, 1), narrow(k_norm, 1), ref_positions, theta, eps);

        std::vector<int32_t> table_positions(static_cast<size_t>(max_position));
        std::iota(table_positions.begin(), table_positions.end(), 0);
        std::vector<float> cos_table(static_cast<size_t>(max_position * rd / 2));
        std::vector<float> sin_table(cos_table.size());
        ropeTableCpu(table_positions.data(), max_position, rd, theta, cos_table.data(), sin_table.data());

        DeviceBuffer d_qkv = c.f32_in ? DeviceBuffer::from(test::toFloat(qkv)) : DeviceBuffer::from(qkv);
        DeviceBuffer d_bias = DeviceBuffer::from(bias);
        DeviceBuffer d_q_norm = DeviceBuffer::from(q_norm);
        DeviceBuffer d_k_norm = DeviceBuffer::from(k_norm);
        DeviceBuffer d_positions = DeviceBuffer::from(positions);
        DeviceBuffer d_slots = DeviceBuffer::from(slot_mapping);
        DeviceBuffer d_cos = DeviceBuffer::from(cos_table);
        DeviceBuffer d_sin = DeviceBuffer::from(sin_table);
        const size_t cache_elems = static_cast<size_t>(slots * c.kv_heads * hs);
        DeviceBuffer d_q(static_cast<size_t>(c.tokens * c.heads * hs) * 2);
        DeviceBuffer d_k_cache(cache_elems * 2);
        DeviceBuffer d_v_cache(cache_elems * 2);
        d_q.poison();
        d_k_cache.poison();
        d_v_cache.poison();

        QkvRopeParams p;
        p.num_tokens = c.tokens;
        p.num_heads = c.heads;
        p.num_kv_heads = c.kv_heads;
        p.head_dim = hs;
        p.rope_dim = rd;
        p.eps = eps;
        p.qkv = d_qkv.get();
        p.qkv_dtype = c.f32_in ? ActDType::kF32 : ActDType::kBf16;
        p.qkv_bias = c.bias ? d_bias.as<core::Bf16>() : nullptr;
        p.q_norm = c.norms ? d_q_norm.as<core::Bf16>() : nullptr;
        p.k_norm = c.norms ? d_k_norm.as<core::Bf16>() : nullptr;
        p.positions = d_positions.as<int32_t>();
        p.rope_cos = d_cos.as<float>();
        p.rope_sin = d_sin.as<float>();
        p.max_position = max_position;
        p.slot_mapping = d_slots.as<int32_t>();
        p.num_blocks = num_blocks;
        p.block_size = block_size;
        p.q_out = d_q.as<core::Bf16>();
        p.k_cache = d_k_cache.as<core::Bf16>();
        p.v_cache = d_v_cache.as<core::Bf16>();
        qkvRopeCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());

        // Splits stored heads [runs, hs] into the model's lanes and the padded ones (which must be exact zeros).
        int64_t nonzero_padding = 0;
        auto model_lanes = [&](const std::vector<core::Bf16>& stored, int64_t first_run, int64_t runs) {
            std::vector<float> out;
            for (int64_t r = first_run; r < first_run + runs; ++r) {
                for (int64_t i = 0; i < hs; ++i) {
                    const core::Bf16 v = stored[static_cast<size_t>(r * hs + i)];
                    if (i < rd) {
                        out.push_back(v.toFloat());
                    } else {
                        nonzero_padding += v.bits != 0;
                    }
                }
            }
            return out;
        };
        const auto q_stored = d_q.download<core::Bf16>(static_cast<size_t>(c.tokens * c.heads * hs));
        std::vector<float> q_got = model_lanes(q_stored, 0, c.tokens * c.heads);
        for (float e : q_got) ASSERT_TRUE(std::isfinite(e)) << "a q element was not written";
        std::vector<float> q_want = ref.q;
        for (int64_t i = 0; i < c.heads * rd; ++i) {
            ASSERT_EQ(q_got[static_cast<size_t>(2 * c.heads * rd + i)], 0.0f) << "token 2's q (no position)";
            q_want[static_cast<size_t>(2 * c.heads * rd + i)] = 0.0f;
        }
        EXPECT_LT(test::relativeL2(q_got, q_want), kBf16Tolerance);

        const auto k_cache = d_k_cache.download<core::Bf16>(cache_elems);
        const auto v_cache = d_v_cache.download<core::Bf16>(cache_elems);
        std::vector<bool> slot_written(static_cast<size_t>(slots), false);
        std::vector<float> k_got, k_want, v_got, v_want;
        for (int64_t t = 0; t < c.tokens; ++t) {
            if (t == 1 || t == 2) continue;
            const int64_t slot = slot_mapping[static_cast<size_t>(t)];
            slot_written[static_cast<size_t>(slot)] = true;
            for (const float v : model_lanes(k_cache, slot * c.kv_heads, c.kv_heads)) k_got.push_back(v);
            for (const float v : model_lanes(v_cache, slot * c.kv_heads, c.kv_heads)) v_got.push_back(v);
            k_want.insert(k_want.end(), ref.k.begin() + t * c.kv_heads * rd, ref.k.begin() + (t + 1) * c.kv_heads * rd);
            v_want.insert(v_want.end(), ref.v.begin() + t * c.kv_heads * rd, ref.v.begin() + (t + 1) * c.kv_heads * rd);
        }
        EXPECT_LT(test::relativeL2(k_got, k_want), kBf16Tolerance);
        EXPECT_LT(test::relativeL2(v_got, v_want), kBf16Tolerance);
        EXPECT_EQ(nonzero_padding, 0) << "padded lanes of q, k or v hold something else than zero";
        int64_t unmapped_written = 0;
        for (int64_t slot = 0; slot < slots; ++slot) {
            if (slot_written[static_cast<size_t>(slot)]) continue;
            for (int64_t i = 0; i < c.kv_heads * hs; ++i) {
                unmapped_written += k_cache[static_cast<size_t>(slot * c.kv_heads * hs + i)].bits != kPoisonBits;
                unmapped_written += v_cache[static_cast<size_t>(slot * c.kv_heads * hs + i)].bits != kPoisonBits;
            }
        }
        EXPECT_EQ(unmapped_written, 0) << "K/V written at slots no token maps to";
    }
}

}  // namespace
}  // namespace afd::kernels
