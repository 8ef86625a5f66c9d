// CpuOps against the unfused CPU reference kernels (bit for bit) and the KV cache on CpuOps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "attention/cpu_ops.h"
#include "attention/kv_cache.h"
#include "attention/sampler.h"
#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

Tensor randomF32(std::mt19937& rng, core::Shape shape, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(shape));
    std::normal_distribution<float> dist(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    return t;
}

Tensor randomBf16(std::mt19937& rng, core::Shape shape, float mean = 0.0f, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kBf16, std::move(shape));
    std::normal_distribution<float> dist(mean, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<core::Bf16>()[i] = core::Bf16(dist(rng));
    return t;
}

Tensor poisoned(core::Shape shape) {
    Tensor t = Tensor::empty(DType::kF32, std::move(shape));
    std::fill(t.data<float>(), t.data<float>() + t.numel(), std::numeric_limits<float>::quiet_NaN());
    return t;
}

Tensor i32(const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty(DType::kI32, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return t;
}

Tensor copyOf(const Tensor& t) {
    Tensor c = Tensor::empty(t.dtype(), t.shape());
    std::memcpy(c.rawData(), t.rawData(), t.nbytes());
    return c;
}

// Same bytes (NaN poison included).
bool sameBits(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.rawData(), b.rawData(), a.nbytes()) == 0;
}

TEST(KvCache, PoolsOnCpuOpsInTheActivationDtype) {
    CpuOps ops;
    KvCacheShape shape{2, 5, 4, 2, 8, DType::kF32};
    KvCache cache(shape, ops);
    EXPECT_EQ(shape.bytes(), 2u * 2 * 5 * 4 * 2 * 8 * sizeof(float));
    for (int64_t l = 0; l < 2; ++l) {
        EXPECT_EQ(cache.keys(l).shape(), (core::Shape{5, 4, 2, 8}));
        EXPECT_EQ(cache.values(l).dtype(), DType::kF32);
        EXPECT_TRUE(cache.keys(l).device().isCpu());
        EXPECT_NE(cache.keys(l).rawData(), cache.values(l).rawData());
    }
    EXPECT_NE(cache.keys(0).rawData(), cache.keys(1).rawData());
    EXPECT_EQ(cache.allocator().numFree(), 5);
    shape.dtype = DType::kBf16;  // not CpuOps' activation dtype
    EXPECT_THROW(KvCache(shape, ops), core::Error);
}

TEST(CpuOps, QkvRopeKvWriteMatchesTheUnfusedKernels) {
    std::mt19937 rng(5);
    constexpr int64_t n = 6, nh = 4, nkv = 2, hd = 16, bs = 4, num_blocks = 5, P = 20;
    const float eps = 1e-6f;
    CpuOps ops;
    const Tensor qkv = randomF32(rng, {n, (nh + 2 * nkv) * hd});
    const Tensor q_norm = randomBf16(rng, {hd}, 1.0f, 0.1f);
    const Tensor k_norm = randomBf16(rng, {hd}, 1.0f, 0.1f);
    // One sequence's blocks, its positions and their slots; token 2's K/V are not written (-1).
    const std::vector<int32_t> table = {3, 0, 4, 1, 2};
    const std::vector<int32_t> positions = {0, 5, 9, 12, 13, 19};
    std::vector<int32_t> slots;
    for (int32_t p : positions) slots.push_back(table[static_cast<size_t>(p / bs)] * bs + p % bs);
    slots[2] = -1;
    RopeTable rope{Tensor::empty(DType::kF32, {P, hd / 2}), Tensor::empty(DType::kF32, {P, hd / 2})};
    std::vector<int32_t> all(P);
    std::iota(all.begin(), all.end(), 0);
    kernels::ropeTableCpu(all.data(), P, hd, 1e6, rope.cos.data<float>(), rope.sin.data<float>());
    const Tensor k_cache = poisoned({num_blocks, bs, nkv, hd});
    const Tensor v_cache = poisoned({num_blocks, bs, nkv, hd});
    const Tensor q_out = poisoned({n, nh * hd});
    ops.qkvRopeKvWrite(qkv, nullptr, q_norm, k_norm, eps, rope, i32(positions), i32(slots), k_cache, v_cache, q_out);

    // The model runner's former sequence: three projections' outputs, per-head norms, a per-step RoPE table, the
    // per-token KV write.
    const int64_t width = (nh + 2 * nkv) * hd;
    std::vector<float> q(n * nh * hd), k(n * nkv * hd), v(n * nkv * hd);
    for (int64_t t = 0; t < n; ++t) {
        const float* row = qkv.data<float>() + t * width;
        std::copy(row, row + nh * hd, q.data() + t * nh * hd);
        std::copy(row + nh * hd, row + (nh + nkv) * hd, k.data() + t * nkv * hd);
        std::copy(row + (nh + nkv) * hd, row + width, v.data() + t * nkv * hd);
    }
    kernels::rmsNormCpu({n * nh, hd, eps, q.data(), q_norm.data<core::Bf16>(), q.data()});
    kernels::rmsNormCpu({n * nkv, hd, eps, k.data(), k_norm.data<core::Bf16>(), k.data()});
    std::vector<float> cos(n * hd / 2), sin(n * hd / 2);
    kernels::ropeTableCpu(positions.data(), n, hd, 1e6, cos.data(), sin.data());
    kernels::applyRopeCpu({n, nh, hd, cos.data(), sin.data(), q.data()});
    kernels::applyRopeCpu({n, nkv, hd, cos.data(), sin.data(), k.data()});
    EXPECT_EQ(std::memcmp(q.data(), q_out.rawData(), q.size() * sizeof(float)), 0);

    const Tensor k_want = poisoned({num_blocks, bs, nkv, hd});
    const Tensor v_want = poisoned({num_blocks, bs, nkv, hd});
    std::vector<int32_t> written_pos;
    std::vector<float> written_k, written_v;
    for (int64_t t = 0; t < n; ++t) {
        if (slots[static_cast<size_t>(t)] < 0) continue;
        written_pos.push_back(positions[static_cast<size_t>(t)]);
        written_k.insert(written_k.end(), k.begin() + t * nkv * hd, k.begin() + (t + 1) * nkv * hd);
        written_v.insert(written_v.end(), v.begin() + t * nkv * hd, v.begin() + (t + 1) * nkv * hd);
    }
    const std::vector<int32_t> seq(written_pos.size(), 0);
    kernels::KvCacheWriteParams w;
    w.layout = {num_blocks, bs, nkv, hd, table.data(), static_cast<int64_t>(table.size())};
    w.num_tokens = static_cast<int64_t>(written_pos.size());
    w.token_seq = seq.data();
    w.token_pos = written_pos.data();
    w.k = written_k.data();
    w.v = written_v.data();
    w.k_cache = k_want.data<float>();
    w.v_cache = v_want.data<float>();
    kernels::kvCacheWriteCpu(w);
    EXPECT_TRUE(sameBits(k_cache, k_want));
    EXPECT_TRUE(sameBits(v_cache, v_want));

    EXPECT_THROW(ops.qkvRopeKvWrite(qkv, nullptr, q_norm, k_norm, eps, rope, i32({0, 1, 2, 3, 4, P}), i32(slots),
                                    k_cache, v_cache, q_out),
                 core::Error);  // a position beyond the table
}

TEST(CpuOps, AttentionOverChunksMatchesThePerTokenKernel) {
    std::mt19937 rng(9);
    constexpr int64_t nh = 4, nkv = 2, hd = 8, bs = 4, num_blocks = 6, W = 3;
    CpuOps ops;
    const Tensor k_cache = randomF32(rng, {num_blocks, bs, nkv, hd});
    const Tensor v_cache = randomF32(rng, {num_blocks, bs, nkv, hd});
    // Chunk 0: 3 rows of a sequence of 7; chunk 1: padding (2 rows); chunk 2: 1 row (a decode) of a sequence of 5.
    const std::vector<int32_t> q_start = {0, 3, 5, 6};
    const std::vector<int32_t> seq_len = {7, 0, 5};
    const std::vector<int32_t> tables = {5, 1, -1, -1, -1, -1, 2, 0, -1};
    AttentionChunks chunks;
    chunks.q_start = i32(q_start);
    chunks.seq_len = i32(seq_len);
    chunks.block_tables = i32(tables).reshape({3, W});
    chunks.max_query_len = 3;
    chunks.max_seq_len = 7;
    const Tensor q = randomF32(rng, {6, nh * hd});
    const Tensor out = poisoned({6, nh * hd});
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ops.attention(q, k_cache, v_cache, chunks, scale, out);

    const std::vector<int32_t> token_seq = {0, 0, 0, 2};
    const std::vector<int32_t> token_pos = {4, 5, 6, 4};
    std::vector<float> q_rows(4 * nh * hd), want(4 * nh * hd);
    std::copy(q.data<float>(), q.data<float>() + 3 * nh * hd, q_rows.begin());
    std::copy(q.data<float>() + 5 * nh * hd, q.data<float>() + 6 * nh * hd, q_rows.begin() + 3 * nh * hd);
    kernels::PagedAttentionParams p;
    p.layout = {num_blocks, bs, nkv, hd, tables.data(), W};
    p.num_tokens = 4;
    p.num_heads = nh;
    p.scale = scale;
    p.token_seq = token_seq.data();
    p.token_pos = token_pos.data();
    p.q = q_rows.data();
    p.k_cache = k_cache.data<float>();
    p.v_cache = v_cache.data<float>();
    p.out = want.data();
    kernels::pagedAttentionCpu(p);
    const float* got = out.data<float>();
    EXPECT_EQ(std::memcmp(got, want.data(), 3 * nh * hd * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got + 5 * nh * hd, want.data() + 3 * nh * hd, nh * hd * sizeof(float)), 0);
    for (int64_t i = 3 * nh * hd; i < 5 * nh * hd; ++i) ASSERT_EQ(got[i], 0.0f) << "padding row element " << i;
}

TEST(CpuOps, AddRmsNormAddsDeltaAndBiasThenNorms) {
    std::mt19937 rng(3);
    constexpr int64_t n = 5, H = 24;
    const float eps = 1e-6f;
    CpuOps ops;
    const Tensor residual = randomF32(rng, {n, H});
    const Tensor delta = randomF32(rng, {n, H});
    const Tensor bias = randomBf16(rng, {H});
    const Tensor weight = randomBf16(rng, {H}, 1.0f, 0.1f);
    std::vector<float> h(residual.data<float>(), residual.data<float>() + n * H);
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < H; ++i) {
            // linearCpu's order: the bias joins the projection's output, which then joins the residual.
            const float projected = delta.data<float>()[t * H + i] + bias.data<core::Bf16>()[i].toFloat();
            h[static_cast<size_t>(t * H + i)] += projected;
        }
    }
    std::vector<float> want(n * H);
    kernels::rmsNormCpu({n, H, eps, h.data(), weight.data<core::Bf16>(), want.data()});
    const Tensor out = poisoned({n, H});
    ops.addRmsNorm(residual, &delta, &bias, weight, eps, out);
    EXPECT_EQ(std::memcmp(residual.rawData(), h.data(), h.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(out.rawData(), want.data(), want.size() * sizeof(float)), 0);

    // No delta: the residual is left alone.
    const Tensor before = copyOf(residual);
    kernels::rmsNormCpu({n, H, eps, h.data(), weight.data<core::Bf16>(), want.data()});
    ops.addRmsNorm(residual, nullptr, nullptr, weight, eps, out);
    EXPECT_TRUE(sameBits(residual, before));
    EXPECT_EQ(std::memcmp(out.rawData(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_THROW(ops.addRmsNorm(residual, nullptr, &bias, weight, eps, out), core::Error);
}

// CpuPrecision::kBf16Activations: the FP32 reference's values, each rounded to bf16 where the GPU engine stores bf16
// (the normed activations here), and the residual left in FP32.
TEST(CpuOps, Bf16ActivationsRoundTheNormedRowsOnly) {
    std::mt19937 rng(5);
    constexpr int64_t n = 4, H = 32;
    CpuOps fp32;
    CpuOps bf16(CpuPrecision::kBf16Activations);
    EXPECT_EQ(bf16.precision(), CpuPrecision::kBf16Activations);
    const Tensor residual = randomF32(rng, {n, H});
    const Tensor delta = randomF32(rng, {n, H});
    const Tensor weight = randomBf16(rng, {H}, 1.0f, 0.1f);
    const Tensor residual_fp32 = copyOf(residual);
    const Tensor out_fp32 = poisoned({n, H});
    const Tensor out_bf16 = poisoned({n, H});
    fp32.addRmsNorm(residual_fp32, &delta, nullptr, weight, 1e-6f, out_fp32);
    bf16.addRmsNorm(residual, &delta, nullptr, weight, 1e-6f, out_bf16);
    EXPECT_TRUE(sameBits(residual, residual_fp32));
    int64_t changed = 0;
    for (int64_t i = 0; i < n * H; ++i) {
        const float want = core::roundToBf16(out_fp32.data<float>()[i]);
        ASSERT_EQ(out_bf16.data<float>()[i], want) << i;
        changed += want != out_fp32.data<float>()[i];
    }
    EXPECT_GT(changed, n * H / 2);  // the rounding happened
}

TEST(CpuOps, RmsNormRowsNormsTheChosenRows) {
    std::mt19937 rng(4);
    constexpr int64_t T = 6, H = 16;
    CpuOps ops;
    const Tensor residual = randomF32(rng, {T, H});
    const Tensor weight = randomBf16(rng, {H}, 1.0f, 0.1f);
    const Tensor out = poisoned({2, H});
    ops.rmsNormRows(residual, i32({5, 2}), weight, 1e-6f, out);
    std::vector<float> want(2 * H);
    std::copy(residual.data<float>() + 5 * H, residual.data<float>() + 6 * H, want.begin());
    std::copy(residual.data<float>() + 2 * H, residual.data<float>() + 3 * H, want.begin() + H);
    kernels::rmsNormCpu({2, H, 1e-6f, want.data(), weight.data<core::Bf16>(), want.data()});
    EXPECT_EQ(std::memcmp(out.rawData(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_THROW(ops.rmsNormRows(residual, i32({6}), weight, 1e-6f, out.slice(0, 1)), core::Error);
}

TEST(CpuOps, CopyConvertsBetweenF32AndBf16) {
    CpuOps ops;
    Tensor f = Tensor::empty(DType::kF32, {2, 2});
    const float values[] = {1.0f, -2.5f, 3.00390625f, 1e-3f};
    std::copy(values, values + 4, f.data<float>());
    Tensor b = Tensor::empty(DType::kBf16, {4});
    ops.copy(f, b);
    Tensor back = Tensor::empty(DType::kF32, {4});
    ops.copy(b, back);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(back.data<float>()[i], core::roundToBf16(values[i]));
    Tensor same = Tensor::empty(DType::kF32, {4});
    ops.copy(f, same);
    EXPECT_TRUE(sameBits(same, f));
    EXPECT_THROW(ops.copy(f, Tensor::empty(DType::kF32, {3})), core::Error);
    EXPECT_THROW(ops.copy(f, Tensor::empty(DType::kI32, {4})), core::Error);
}

TEST(CpuOps, SampleDrawsFromEachRequestsOwnStream) {
    std::mt19937 rng(8);
    constexpr int64_t V = 50;
    CpuOps ops;
    const Tensor logits = randomF32(rng, {2, V}, 2.0f);
    SamplingParams greedy;
    SamplingParams hot;
    hot.temperature = 0.9f;
    hot.top_k = 10;
    hot.top_p = 0.8f;
    std::mt19937_64 stream0(1), stream1(42);
    const SampleRequest requests[] = {{&greedy, &stream0, 0}, {&hot, &stream1, 3}};
    int32_t tokens[2] = {-1, -1};
    ops.sample(logits, requests, tokens);
    std::mt19937_64 ref0(1), ref1(42);
    EXPECT_EQ(tokens[0], sampleToken(logits.data<float>(), V, greedy, ref0));
    EXPECT_EQ(tokens[1], sampleToken(logits.data<float>() + V, V, hot, ref1));
    EXPECT_EQ(stream1(), ref1());  // the request's stream advanced exactly as the reference's
}

}  // namespace
}  // namespace afd::attention
