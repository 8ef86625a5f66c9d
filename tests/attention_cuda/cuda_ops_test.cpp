// CudaOps against CpuOps, op by op, on fresh random inputs with every device output poisoned (NaN) first: copies and
// their F32 <-> BF16 conversions (in pieces larger than the scratch), embedding, the add + RMSNorm ops, the GEMMs
// (BF16 and FP32 out, bias), the QKV post-processing with the paged KV write, paged attention over prefill, decode and
// padding chunks, greedy and seeded sampling, and graph capture and replay. BF16 outputs are compared by relative L2
// error (about 1e-2). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "attention/cpu_ops.h"
#include "attention/cuda/cuda_ops.h"
#include "attention/sampler.h"
#include "attention_cuda/engine_test_util.h"
#include "core/bf16.h"
#include "kernels/rope.h"

namespace afd::attention::test {
namespace {

using core::DType;
using core::Tensor;

Tensor randomBf16(std::mt19937& rng, core::Shape shape, float mean = 0.0f, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kBf16, std::move(shape));
    std::normal_distribution<float> dist(mean, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<core::Bf16>()[i] = core::Bf16(dist(rng));
    return t;
}

Tensor randomF32(std::mt19937& rng, core::Shape shape, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(shape));
    std::normal_distribution<float> dist(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    return t;
}

Tensor i32(const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty(DType::kI32, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return t;
}

// The host tensor as FP32 (BF16 values widened exactly).
Tensor asF32(const Tensor& t) {
    if (t.dtype() == DType::kF32) return t;
    Tensor f = Tensor::empty(DType::kF32, t.shape());
    CpuOps().copy(t, f);
    return f;
}

class CudaOpsTest : public ::testing::Test {
protected:
    void SetUp() override {
        AFD_SKIP_WITHOUT_GPU();
        ops_ = std::make_unique<CudaOps>(0);
    }

    // A device copy of a host tensor, in `dtype` (converted by the ops).
    Tensor up(const Tensor& host, DType dtype) {
        Tensor d = ops_->empty(dtype, host.shape());
        ops_->copy(host, d);
        return d;
    }
    Tensor up(const Tensor& host) { return up(host, host.dtype()); }
    // Device memory of NaN (every byte 0xFF).
    Tensor poisoned(DType dtype, core::Shape shape) {
        Tensor d = ops_->empty(dtype, std::move(shape));
        EXPECT_EQ(cudaMemsetAsync(d.rawData(), 0xFF, d.nbytes(), static_cast<cudaStream_t>(ops_->stream())),
                  cudaSuccess);
        return d;
    }
    // The device tensor on the host as FP32, after the stream has passed everything before.
    Tensor down(const Tensor& device) {
        Tensor h = Tensor::empty(DType::kF32, device.shape());
        ops_->copy(device, h);
        ops_->synchronize();
        return h;
    }
    static double relL2(const Tensor& got, const Tensor& want) {
        EXPECT_EQ(got.numel(), want.numel());
        double num = 0, den = 0;
        for (int64_t i = 0; i < want.numel(); ++i) {
            const double g = got.data<float>()[i], w = want.data<float>()[i];
            if (!std::isfinite(g)) return INFINITY;  // unwritten (poison) or broken
            num += (g - w) * (g - w);
            den += w * w;
        }
        return std::sqrt(num / den);
    }

    std::unique_ptr<CudaOps> ops_;
    CpuOps cpu_;
    std::mt19937 rng_{29};
};

TEST_F(CudaOpsTest, CopiesConvertBothWaysInPiecesLargerThanTheScratch) {
    // 3 Mi values: more than the 8 MiB scratch holds in FP32, so the conversions go in pieces.
    const int64_t n = 3 * (int64_t{1} << 20) + 40;
    const Tensor x = randomF32(rng_, {n});
    Tensor want = Tensor::empty(DType::kBf16, {n});
    cpu_.copy(x, want);
    const Tensor d = poisoned(DType::kBf16, {n});
    ops_->copy(x, d);  // host F32 -> device BF16
    Tensor back = Tensor::empty(DType::kBf16, {n});
    ops_->copy(d, back);  // same dtype
    ops_->synchronize();
    EXPECT_EQ(std::memcmp(back.rawData(), want.rawData(), want.nbytes()), 0);
    const Tensor widened = down(d);  // device BF16 -> host F32
    EXPECT_EQ(std::memcmp(widened.rawData(), asF32(want).rawData(), widened.nbytes()), 0);
    // Device to device, and host BF16 into device F32.
    const Tensor f = poisoned(DType::kF32, {n});
    ops_->copy(d, f);
    EXPECT_EQ(std::memcmp(down(f).rawData(), widened.rawData(), widened.nbytes()), 0);
    const Tensor g = poisoned(DType::kF32, {n});
    ops_->copy(want, g);
    EXPECT_EQ(std::memcmp(down(g).rawData(), widened.rawData(), widened.nbytes()), 0);
    // Pinned host memory is host memory the GPU reaches.
    const Tensor pinned = ops_->emptyHost(DType::kF32, {4, 8});
    EXPECT_TRUE(pinned.device().isCpu());
    cudaPointerAttributes attributes{};
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, pinned.rawData()), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
    EXPECT_THROW(ops_->copy(x, ops_->empty(DType::kI32, {n})), core::Error);  // no F32 -> I32 conversion
}

TEST_F(CudaOpsTest, EmbeddingAndNormsMatchCpuOps) {
    constexpr int64_t T = 37, H = 128, V = 96;
    std::vector<int32_t> ids(T);
    std::uniform_int_distribution<int32_t> id(0, V - 1);
    for (auto& v : ids) v = id(rng_);
    const Tensor table = randomBf16(rng_, {V, H});
    Tensor want = Tensor::empty(DType::kF32, {T, H});
    cpu_.embedding(i32(ids), table, want);
    const Tensor out = poisoned(DType::kF32, {T, H});
    ops_->embedding(up(i32(ids)), up(table), out);
    EXPECT_EQ(std::memcmp(down(out).rawData(), want.rawData(), want.nbytes()), 0);

    // residual += delta + bias, then the norm; BF16 and F32 deltas.
    const Tensor weight = randomBf16(rng_, {H}, 1.0f, 0.2f);
    const Tensor bias = randomBf16(rng_, {H}, 0.0f, 0.1f);
    for (const DType delta_dtype : {DType::kBf16, DType::kF32}) {
        const Tensor residual = randomF32(rng_, {T, H});
        const Tensor delta = delta_dtype == DType::kBf16 ? randomBf16(rng_, {T, H}) : randomF32(rng_, {T, H});
        Tensor cpu_residual = Tensor::empty(DType::kF32, {T, H});
        cpu_.copy(residual, cpu_residual);
        Tensor cpu_out = Tensor::empty(DType::kF32, {T, H});
        const Tensor cpu_delta = asF32(delta);
        cpu_.addRmsNorm(cpu_residual, &cpu_delta, &bias, weight, 1e-6f, cpu_out);
        const Tensor gpu_residual = up(residual);
        const Tensor gpu_delta = up(delta);
        const Tensor gpu_bias = up(bias);
        const Tensor gpu_out = poisoned(DType::kBf16, {T, H});
        ops_->addRmsNorm(gpu_residual, &gpu_delta, &gpu_bias, up(weight), 1e-6f, gpu_out);
        EXPECT_LT(relL2(down(gpu_residual), cpu_residual), 1e-6);
        EXPECT_LT(relL2(down(gpu_out), cpu_out), 1e-2);
        // The final norm of chosen rows.
        const std::vector<int32_t> rows = {5, 0, 36, 5};
        Tensor cpu_rows = Tensor::empty(DType::kF32, {4, H});
        cpu_.rmsNormRows(cpu_residual, i32(rows), weight, 1e-6f, cpu_rows);
        const Tensor gpu_rows = poisoned(DType::kBf16, {4, H});
        ops_->rmsNormRows(gpu_residual, up(i32(rows)), up(weight), 1e-6f, gpu_rows);
        EXPECT_LT(relL2(down(gpu_rows), cpu_rows), 1e-2);
    }
}

TEST_F(CudaOpsTest, LinearMatchesCpuOpsInBothOutputDtypes) {
    for (const int64_t M : {1, 7, 64, 300}) {
        constexpr int64_t K = 128, N = 192;
        const Tensor x = randomBf16(rng_, {M, K});
        const Tensor w = randomBf16(rng_, {N, K}, 0.0f, 0.1f);
        const Tensor bias = randomBf16(rng_, {N}, 0.0f, 0.1f);
        Tensor want = Tensor::empty(DType::kF32, {M, N});
        cpu_.linear(asF32(x), w, &bias, want);
        const Tensor gpu_bias = up(bias);
        const Tensor y = poisoned(DType::kBf16, {M, N});
        ops_->linear(up(x), up(w), &gpu_bias, y);
        EXPECT_LT(relL2(down(y), want), 1e-2) << "M=" << M;
        cpu_.linear(asF32(x), w, nullptr, want);
        const Tensor logits = poisoned(DType::kF32, {M, N});
        ops_->linear(up(x), up(w), nullptr, logits);
        EXPECT_LT(relL2(down(logits), want), 1e-4) << "M=" << M;
    }
}

// Two steps over a paged cache: step 1 prefills sequence A (20 tokens) and 29 tokens of sequence B; step 2 decodes
// B's 30th token beside a padding row (slot -1, a chunk with seq_len 0).
TEST_F(CudaOpsTest, QkvRopeKvWriteAndAttentionMatchCpuOps) {
    constexpr int64_t nh = 4, nkv = 2, hd = 64, bs = 16, num_blocks = 8, W = 2, P = 64;
    const float eps = 1e-6f;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const std::vector<int32_t> table_a = {3, 5}, table_b = {0, 6};
    RopeTable cpu_rope{Tensor::empty(DType::kF32, {P, hd / 2}), Tensor::empty(DType::kF32, {P, hd / 2})};
    std::vector<int32_t> all(P);
    std::iota(all.begin(), all.end(), 0);
    kernels::ropeTableCpu(all.data(), P, hd, 1e6, cpu_rope.cos.data<float>(), cpu_rope.sin.data<float>());
    const RopeTable gpu_rope{up(cpu_rope.cos), up(cpu_rope.sin)};
    const Tensor q_norm = randomBf16(rng_, {hd}, 1.0f, 0.1f);
    const Tensor k_norm = randomBf16(rng_, {hd}, 1.0f, 0.1f);
    const Tensor gpu_q_norm = up(q_norm), gpu_k_norm = up(k_norm);
    Tensor cpu_k = Tensor::empty(DType::kF32, {num_blocks, bs, nkv, hd});
    Tensor cpu_v = Tensor::empty(DType::kF32, {num_blocks, bs, nkv, hd});
    std::fill(cpu_k.data<float>(), cpu_k.data<float>() + cpu_k.numel(), 0.0f);
    std::fill(cpu_v.data<float>(), cpu_v.data<float>() + cpu_v.numel(), 0.0f);
    const Tensor gpu_k = poisoned(DType::kBf16, cpu_k.shape());
    const Tensor gpu_v = poisoned(DType::kBf16, cpu_v.shape());
    auto slotOf = [&](const std::vector<int32_t>& table, int32_t pos) {
        return table[static_cast<size_t>(pos / bs)] * static_cast<int32_t>(bs) + pos % static_cast<int32_t>(bs);
    };
    // Block table rows, -1 padded (null: a padding chunk's row).
    auto tables = [&](std::initializer_list<const std::vector<int32_t>*> rows) {
        Tensor t = Tensor::empty(DType::kI32, {static_cast<int64_t>(rows.size()), W});
        int32_t* at = t.data<int32_t>();
        for (const auto* r : rows) {
            for (int64_t j = 0; j < W; ++j) *at++ = r == nullptr ? -1 : (*r)[static_cast<size_t>(j)];
        }
        return t;
    };
    struct Step {
        std::vector<int32_t> positions, slots, q_start, seq_len;
        Tensor block_tables;
        int32_t max_q = 0, max_seq = 0;
    };
    Step s1;
    for (int32_t p = 0; p < 20; ++p) {
        s1.positions.push_back(p);
        s1.slots.push_back(slotOf(table_a, p));
    }
    for (int32_t p = 0; p < 29; ++p) {
        s1.positions.push_back(p);
        s1.slots.push_back(slotOf(table_b, p));
    }
    s1.q_start = {0, 20, 49};
    s1.seq_len = {20, 29};
    s1.block_tables = tables({&table_a, &table_b});
    s1.max_q = 29;
    s1.max_seq = 29;
    Step s2;
    s2.positions = {29, 0};
    s2.slots = {slotOf(table_b, 29), -1};
    s2.q_start = {0, 1, 2};
    s2.seq_len = {30, 0};
    s2.block_tables = tables({&table_b, nullptr});
    s2.max_q = 1;
    s2.max_seq = 30;

    for (const Step* step : {&s1, &s2}) {
        SCOPED_TRACE(step == &s1 ? "prefill" : "decode with padding");
        const auto n = static_cast<int64_t>(step->positions.size());
        const Tensor qkv = randomBf16(rng_, {n, (nh + 2 * nkv) * hd});
        // The prefill step reads BF16 projections; the decode step FP32 ones with a bias (attention_bias).
        const bool f32_with_bias = step == &s2;
        const Tensor bias = randomBf16(rng_, {(nh + 2 * nkv) * hd});
        const Tensor gpu_bias = up(bias);
        Tensor cpu_q = Tensor::empty(DType::kF32, {n, nh * hd});
        cpu_.qkvRopeKvWrite(asF32(qkv), f32_with_bias ? &bias : nullptr, q_norm, k_norm, eps, cpu_rope,
                            i32(step->positions), i32(step->slots), cpu_k, cpu_v, cpu_q);
        const Tensor gpu_q = poisoned(DType::kBf16, {n, nh * hd});
        ops_->qkvRopeKvWrite(f32_with_bias ? up(asF32(qkv)) : up(qkv), f32_with_bias ? &gpu_bias : nullptr, gpu_q_norm,
                             gpu_k_norm, eps, gpu_rope, up(i32(step->positions)), up(i32(step->slots)), gpu_k, gpu_v,
                             gpu_q);
        const Tensor gpu_q_host = down(gpu_q);
        EXPECT_LT(relL2(gpu_q_host, cpu_q), 1e-2);

        AttentionChunks cpu_chunks{i32(step->q_start), i32(step->seq_len), step->block_tables, step->max_q,
                                   step->max_seq};
        AttentionChunks gpu_chunks{up(cpu_chunks.q_start), up(cpu_chunks.seq_len), up(step->block_tables), step->max_q,
                                   step->max_seq};
        Tensor cpu_out = Tensor::empty(DType::kF32, {n, nh * hd});
        // The CPU reads the GPU's (rounded) queries, so that only the attention itself is compared.
        cpu_.attention(gpu_q_host, cpu_k, cpu_v, cpu_chunks, scale, cpu_out);
        const Tensor gpu_out = poisoned(DType::kBf16, {n, nh * hd});
        ops_->attention(gpu_q, gpu_k, gpu_v, gpu_chunks, scale, gpu_out);
        const Tensor got = down(gpu_out);
        EXPECT_LT(relL2(got, cpu_out), 2e-2);
        if (step == &s2) {
            for (int64_t i = nh * hd; i < 2 * nh * hd; ++i) ASSERT_EQ(got.data<float>()[i], 0.0f) << "padding row";
        }
    }
    // The written cache positions (A's 20, B's 30) against the CPU's; the rest stays poisoned.
    const Tensor k_host = down(gpu_k);
    const Tensor v_host = down(gpu_v);
    std::vector<float> got_k, want_k, got_v, want_v;
    const int64_t row = nkv * hd;
    for (const auto& [table, len] : {std::pair{&table_a, 20}, std::pair{&table_b, 30}}) {
        for (int32_t p = 0; p < len; ++p) {
            const int64_t at = static_cast<int64_t>(slotOf(*table, p)) * row;
            got_k.insert(got_k.end(), k_host.data<float>() + at, k_host.data<float>() + at + row);
            want_k.insert(want_k.end(), cpu_k.data<float>() + at, cpu_k.data<float>() + at + row);
            got_v.insert(got_v.end(), v_host.data<float>() + at, v_host.data<float>() + at + row);
            want_v.insert(want_v.end(), cpu_v.data<float>() + at, cpu_v.data<float>() + at + row);
        }
    }
    auto view = [](std::vector<float>& v) {
        return Tensor::view(v.data(), DType::kF32, {static_cast<int64_t>(v.size())});
    };
    EXPECT_LT(relL2(view(got_k), view(want_k)), 1e-2);
    EXPECT_LT(relL2(view(got_v), view(want_v)), 1e-2);
    EXPECT_TRUE(std::isnan(k_host.data<float>()[static_cast<int64_t>(1) * bs * row]));  // block 1: nobody's
}

TEST_F(CudaOpsTest, SampleIsGreedyAtTemperatureZeroAndFollowsTheSeed) {
    constexpr int64_t R = 6, V = 512;
    const Tensor logits = randomF32(rng_, {R, V}, 2.0f);
    const Tensor gpu_logits = up(logits);
    SamplingParams greedy;
    std::vector<std::mt19937_64> rngs(R);
    std::vector<SampleRequest> requests;
    for (int64_t r = 0; r < R; ++r) requests.push_back({&greedy, &rngs[static_cast<size_t>(r)], r});
    std::vector<int32_t> want(R), got(R, -7);
    cpu_.sample(logits, requests, want);
    ops_->sample(gpu_logits, requests, got);
    EXPECT_EQ(got, want);

    // Sampled rows: the same (seed, offset) give the same id whatever the other rows; another offset may not.
    SamplingParams hot;
    hot.temperature = 1.5f;
    hot.top_p = 0.95f;
    hot.seed = 42;
    for (auto& r : requests) r.params = &hot;
    std::vector<int32_t> first(R), again(R), alone(1);
    ops_->sample(gpu_logits, requests, first);
    ops_->sample(gpu_logits, requests, again);
    EXPECT_EQ(first, again);
    ops_->sample(gpu_logits.slice(3, 4), std::span<const SampleRequest>(requests).subspan(3, 1), alone);
    EXPECT_EQ(alone[0], first[3]);
    for (int32_t id : first) EXPECT_TRUE(id >= 0 && id < V);
}

TEST_F(CudaOpsTest, GraphsReplayTheCapturedOpsOverNewInputs) {
    constexpr int64_t M = 8, K = 64, N = 96;
    const Tensor w = up(randomBf16(rng_, {N, K}, 0.0f, 0.1f));
    const Tensor x = ops_->empty(DType::kBf16, {M, K});
    const Tensor y = poisoned(DType::kF32, {M, N});
    // Prepared before the capture, as reserve() does for the engine's shapes.
    ops_->gemm().prepare({M, N, K, K, N, kernels::cuda::GemmOutDType::kF32, false});
    ASSERT_TRUE(ops_->captureGraph(7,
                                   [&] {
                                       ops_->linear(x, w, nullptr, y);
                                       return core::Status::ok();
                                   })
                    .isOk());
    EXPECT_EQ(ops_->numGraphs(), 1);
    for (int trial = 0; trial < 2; ++trial) {
        const Tensor input = randomBf16(rng_, {M, K});
        ops_->copy(input, x);
        ops_->replayGraph(7);
        const Tensor replayed = down(y);
        const Tensor eager = poisoned(DType::kF32, {M, N});
        ops_->linear(x, w, nullptr, eager);
        EXPECT_EQ(std::memcmp(replayed.rawData(), down(eager).rawData(), replayed.nbytes()), 0);
    }
    // A failed capture stores nothing and leaves the stream usable.
    EXPECT_FALSE(ops_->captureGraph(8, [] { return core::internalError("no"); }).isOk());
    EXPECT_THROW((void)ops_->captureGraph(9, []() -> core::Status { AFD_FAIL("thrown inside the capture"); }),
                 core::Error);
    EXPECT_EQ(ops_->numGraphs(), 1);
    EXPECT_THROW(ops_->replayGraph(8), core::Error);
    ops_->linear(x, w, nullptr, y);
    ops_->synchronize();
}

}  // namespace
}  // namespace afd::attention::test
