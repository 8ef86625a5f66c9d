// The cuBLASLt GEMM (kernels/cuda/blas/cublaslt_gemm.h) against kernels::linearCpu on fresh random inputs, outputs
// poisoned first: the model's shapes (Qwen3-30B-A3B's fused QKV, o_proj and LM head, the tiny fixture's) and odd ones,
// BF16 and FP32 outputs, bias, strided x and column slices of y; rows bit for bit the same whatever M (batch
// invariance, under both algorithm policies); CUDA graph capture after prepare() and replay with new inputs; the
// shape checks (host only).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/blas/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/device_random.h"
#include "kernels/linear.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels::cuda {
namespace {

using test::DeviceBuffer;

#define SKIP_WITHOUT_GPU()                                        \
    do {                                                          \
        if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

constexpr int64_t kQkvRows = (32 + 2 * 4) * 128;  // Qwen3-30B-A3B: 32 q heads, 4 kv heads, head_dim 128
constexpr int64_t kHidden = 2048;
constexpr int64_t kVocab = 151936;

// `count` bf16 values uniform in [-scale, scale) written on the device (the synthetic generator, keyed per buffer).
DeviceBuffer randomDevice(int64_t count, uint64_t key, float scale) {
    DeviceBuffer b(static_cast<size_t>(count) * sizeof(core::Bf16));
    SyntheticFillParams p;
    p.out = b.as<core::Bf16>();
    p.count = count;
    p.key = key;
    p.half_width = scale;
    syntheticFillCuda(p, nullptr);
    return b;
}

std::vector<float> bf16ToFloat(const std::vector<core::Bf16>& v) { return test::toFloat(v); }

// y [rows, n] = x [rows, ldx] (first k columns) · w^T + bias, by the CPU reference.
std::vector<float> reference(const std::vector<core::Bf16>& x, int64_t rows, int64_t ldx, int64_t k,
                             const std::vector<core::Bf16>& w, int64_t n, const std::vector<core::Bf16>& bias) {
    std::vector<float> xf(static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k; ++c)
            xf[static_cast<size_t>(r * k + c)] = x[static_cast<size_t>(r * ldx + c)].toFloat();
    }
    std::vector<float> y(static_cast<size_t>(rows * n));
    LinearParams p;
    p.rows = rows;
    p.in_features = k;
    p.out_features = n;
    p.x = xf.data();
    p.w = w.data();
    p.bias = bias.empty() ? nullptr : bias.data();
    p.y = y.data();
    linearCpu(p);
    return y;
}

// The [m, n] block at column `col` of a downloaded [m, ldy] y, as floats (NaN where poison is left).
std::vector<float> outputBlock(const DeviceBuffer& y, GemmOutDType dtype, int64_t m, int64_t ldy, int64_t col,
                               int64_t n) {
    std::vector<float> out(static_cast<size_t>(m * n));
    if (dtype == GemmOutDType::kF32) {
        const auto all = y.download<float>(static_cast<size_t>(m * ldy));
        for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c)
                out[static_cast<size_t>(r * n + c)] = all[static_cast<size_t>(r * ldy + col + c)];
        }
    } else {
        const auto all = y.download<core::Bf16>(static_cast<size_t>(m * ldy));
        for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                out[static_cast<size_t>(r * n + c)] = all[static_cast<size_t>(r * ldy + col + c)].toFloat();
            }
        }
    }
    return out;
}

struct GemmCase {
    const char* name;
    int64_t m, n, k;
    GemmOutDType dtype;
    bool bias = false;
    int64_t ldx_extra = 0;  // x rows wider than k (a column slice of x)
    int64_t y_col = 0;      // y written at this column of a wider matrix ...
    int64_t ldy = 0;        // ... of this ld (0: n)
};

TEST(CublasLtGemmTest, MatchesCpuReference) {
    SKIP_WITHOUT_GPU();
    AFD_CUDA_CHECK(cudaSetDevice(0));
    CublasLtGemm gemm(0);
    const std::vector<GemmCase> cases = {
        {"qkv M=1", 1, kQkvRows, kHidden, GemmOutDType::kBf16},
        {"qkv M=37", 37, kQkvRows, kHidden, GemmOutDType::kBf16},
        {"qkv M=300", 300, kQkvRows, kHidden, GemmOutDType::kBf16},
        {"o_proj M=1", 1, kHidden, 4096, GemmOutDType::kBf16},
        {"o_proj M=129", 129, kHidden, 4096, GemmOutDType::kBf16},
        {"lm_head M=1", 1, kVocab, kHidden, GemmOutDType::kF32},
        {"lm_head M=5", 5, kVocab, kHidden, GemmOutDType::kF32},
        {"tiny qkv", 9, (4 + 2 * 2) * 16, 64, GemmOutDType::kBf16},
        {"tiny o_proj", 9, 64, 64, GemmOutDType::kBf16},
        {"tiny lm_head", 3, 384, 64, GemmOutDType::kF32},
        {"odd N with padded ldy", 13, 37, 40, GemmOutDType::kBf16, false, 0, 0, 40},
        {"K=8", 1000, 24, 8, GemmOutDType::kF32},
        {"odd sizes", 17, 200, 200, GemmOutDType::kBf16},
        {"bias bf16", 33, kQkvRows, kHidden, GemmOutDType::kBf16, true},
        {"bias odd N", 7, 37, 64, GemmOutDType::kBf16, true, 0, 0, 40},
        {"x slice, y slice", 11, 64, 64, GemmOutDType::kBf16, false, 128, 64, 192},
        {"y slice f32", 6, 128, 256, GemmOutDType::kF32, false, 8, 32, 256},
    };
    uint64_t key = 1;
    for (const GemmCase& c : cases) {
        SCOPED_TRACE(c.name);
        const int64_t ldx = c.k + c.ldx_extra;
        const int64_t ldy = c.ldy == 0 ? c.n : c.ldy;
        const float w_scale = std::sqrt(3.0f / static_cast<float>(c.k));
        DeviceBuffer x = randomDevice(c.m * ldx, key++, 1.0f);
        DeviceBuffer w = randomDevice(c.n * c.k, key++, w_scale);
        DeviceBuffer bias = randomDevice(c.bias ? c.n : 0, key++, 0.5f);
        const size_t elem = c.dtype == GemmOutDType::kF32 ? 4 : 2;
        DeviceBuffer y(static_cast<size_t>(c.m * ldy) * elem);
        y.poison();
        GemmParams p;
        p.m = c.m;
        p.n = c.n;
        p.k = c.k;
        p.x = x.as<core::Bf16>();
        p.ldx = ldx;
        p.w = w.as<core::Bf16>();
        p.bias = c.bias ? bias.as<core::Bf16>() : nullptr;
        p.y = static_cast<char*>(y.get()) + static_cast<size_t>(c.y_col) * elem;
        p.ldy = ldy;
        p.out_dtype = c.dtype;
        gemm.matmul(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        std::cout << "[ GEMM     ] " << c.name << ": " << p.shape().toString() << ": "
                  << gemm.algoInfo(p.shape()).toString() << "\n";

        const auto hx = x.download<core::Bf16>(static_cast<size_t>(c.m * ldx));
        const auto hw = w.download<core::Bf16>(static_cast<size_t>(c.n * c.k));
        const auto hb = c.bias ? bias.download<core::Bf16>(static_cast<size_t>(c.n)) : std::vector<core::Bf16>{};
        const auto want = reference(hx, c.m, ldx, c.k, hw, c.n, hb);
        const auto got = outputBlock(y, c.dtype, c.m, ldy, c.y_col, c.n);
        EXPECT_LT(test::relativeL2(got, want), c.dtype == GemmOutDType::kF32 ? 2e-4 : 1e-2);
        // Every element of the block written; every other column of y left as poisoned.
        const auto raw = y.download<uint8_t>(static_cast<size_t>(c.m * ldy) * elem);
        int64_t written_poison = 0, clobbered = 0;
        for (int64_t r = 0; r < c.m; ++r) {
            for (int64_t col = 0; col < ldy; ++col) {
                const uint8_t* e = raw.data() + static_cast<size_t>(r * ldy + col) * elem;
                const bool poison = std::all_of(e, e + elem, [](uint8_t b) { return b == 0xFF; });
                const bool inside = col >= c.y_col && col < c.y_col + c.n;
                if (inside && poison) ++written_poison;
                if (!inside && !poison) ++clobbered;
            }
        }
        EXPECT_EQ(written_poison, 0) << "elements of y not written";
        EXPECT_EQ(clobbered, 0) << "elements outside the y block written";
    }
}

// The rows [first, first + m) of one x, multiplied in a batch of m: bit for bit the rows of the batch of 2048.
void expectBatchInvariant(CublasLtGemm& gemm, int64_t n, int64_t k, GemmOutDType dtype, uint64_t key) {
    constexpr int64_t kRows = 2048;
    const size_t elem = dtype == GemmOutDType::kF32 ? 4 : 2;
    DeviceBuffer x = randomDevice(kRows * k, key, 1.0f);
    DeviceBuffer w = randomDevice(n * k, key + 1, std::sqrt(3.0f / static_cast<float>(k)));
    auto run = [&](int64_t first, int64_t m, DeviceBuffer& y) {
        GemmParams p;
        p.m = m;
        p.n = n;
        p.k = k;
        p.x = x.as<core::Bf16>() + first * k;
        p.ldx = k;
        p.w = w.as<core::Bf16>();
        p.y = y.get();
        p.ldy = n;
        p.out_dtype = dtype;
        y.poison();
        gemm.matmul(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        return gemm.algoInfo(p.shape());
    };
    DeviceBuffer y_all(static_cast<size_t>(kRows * n) * elem);
    const GemmAlgoInfo all_info = run(0, kRows, y_all);
    const auto all = y_all.download<uint8_t>(static_cast<size_t>(kRows * n) * elem);
    for (const int64_t m : {1, 7, 64, 300, 2048}) {
        for (const int64_t first : {int64_t{0}, int64_t{3}}) {
            if (first + m > kRows) continue;
            SCOPED_TRACE(testing::Message() << "N " << n << " K " << k << " M " << m << " rows from " << first);
            DeviceBuffer y(static_cast<size_t>(m * n) * elem);
            const GemmAlgoInfo info = run(first, m, y);
            const auto got = y.download<uint8_t>(static_cast<size_t>(m * n) * elem);
            const uint8_t* want = all.data() + static_cast<size_t>(first * n) * elem;
            int64_t rows_differing = 0;
            for (int64_t r = 0; r < m; ++r) {
                const size_t row_bytes = static_cast<size_t>(n) * elem;
                if (std::memcmp(got.data() + r * row_bytes, want + r * row_bytes, row_bytes) != 0) ++rows_differing;
            }
            EXPECT_EQ(rows_differing, 0) << "M " << m << ": " << info.toString() << "; M " << kRows << ": "
                                         << all_info.toString();
        }
    }
}

class CublasLtGemmPolicyTest : public testing::TestWithParam<GemmAlgoPolicy> {};

TEST_P(CublasLtGemmPolicyTest, RowsDoNotDependOnTheBatch) {
    SKIP_WITHOUT_GPU();
    AFD_CUDA_CHECK(cudaSetDevice(0));
    CublasLtGemmOptions options;
    options.policy = GetParam();
    CublasLtGemm gemm(0, options);
    expectBatchInvariant(gemm, kQkvRows, kHidden, GemmOutDType::kBf16, 100);
    expectBatchInvariant(gemm, kHidden, 4096, GemmOutDType::kBf16, 200);
    expectBatchInvariant(gemm, kVocab, kHidden, GemmOutDType::kF32, 300);
    expectBatchInvariant(gemm, (4 + 2 * 2) * 16, 64, GemmOutDType::kBf16, 400);
}

INSTANTIATE_TEST_SUITE_P(Policies, CublasLtGemmPolicyTest,
                         testing::Values(GemmAlgoPolicy::kPerShape, GemmAlgoPolicy::kPerWeight),
                         [](const testing::TestParamInfo<GemmAlgoPolicy>& info) {
                             return info.param == GemmAlgoPolicy::kPerShape ? std::string("PerShape")
                                                                            : std::string("PerWeight");
                         });

TEST(CublasLtGemmTest, PerWeightPolicyRunsOneAlgorithmForEveryM) {
    SKIP_WITHOUT_GPU();
    AFD_CUDA_CHECK(cudaSetDevice(0));
    CublasLtGemmOptions options;
    options.policy = GemmAlgoPolicy::kPerWeight;
    CublasLtGemm gemm(0, options);
    const GemmShape reference{kGemmReferenceRows, kQkvRows, kHidden, kHidden, kQkvRows, GemmOutDType::kBf16, false};
    for (const int64_t m : {1, 7, 4096}) {
        GemmShape shape = reference;
        shape.m = m;
        gemm.prepare(shape);
        EXPECT_TRUE(gemm.isPrepared(reference));
        const GemmAlgoInfo a = gemm.algoInfo(shape);
        const GemmAlgoInfo b = gemm.algoInfo(reference);
        EXPECT_EQ(a.algo_id, b.algo_id);
        EXPECT_EQ(a.tile_id, b.tile_id);
        EXPECT_EQ(a.stages_id, b.stages_id);
        EXPECT_EQ(a.custom_option, b.custom_option);
    }
    EXPECT_EQ(gemm.numPrepared(), 4u);
}

TEST(CublasLtGemmTest, PrepareCachesOneAlgorithmPerShape) {
    SKIP_WITHOUT_GPU();
    AFD_CUDA_CHECK(cudaSetDevice(0));
    CublasLtGemm gemm(0);
    GemmShape s{7, 128, 64, 64, 128, GemmOutDType::kBf16, false};
    gemm.prepare(s);
    gemm.prepare(s);
    EXPECT_EQ(gemm.numPrepared(), 1u);
    GemmShape wider = s;
    wider.ldy = 256;  // another leading dimension is another shape
    GemmShape f32 = s;
    f32.out_dtype = GemmOutDType::kF32;
    GemmShape empty = s;
    empty.m = 0;  // nothing to choose
    const std::vector<GemmShape> more = {wider, f32, empty};
    gemm.prepare(more);
    EXPECT_EQ(gemm.numPrepared(), 3u);
    EXPECT_FALSE(gemm.isPrepared(empty));
    const GemmAlgoInfo info = gemm.algoInfo(s);
    EXPECT_LE(info.split_k, 1);
    EXPECT_EQ(info.reduction_scheme, 0u);
    EXPECT_THROW((void)gemm.algoInfo(GemmShape{9, 128, 64, 64, 128, GemmOutDType::kBf16, false}), core::Error);
}

TEST(CublasLtGemmTest, GraphReplayTakesNewInputs) {
    SKIP_WITHOUT_GPU();
    AFD_CUDA_CHECK(cudaSetDevice(0));
    CublasLtGemm gemm(0);
    constexpr int64_t kM = 7;
    DeviceBuffer x(static_cast<size_t>(kM * kHidden) * 2);
    DeviceBuffer w_qkv = randomDevice(kQkvRows * kHidden, 11, std::sqrt(3.0f / kHidden));
    DeviceBuffer bias = randomDevice(kQkvRows, 12, 0.5f);
    DeviceBuffer w_head = randomDevice(4096 * kHidden, 13, std::sqrt(3.0f / kHidden));
    DeviceBuffer y_qkv(static_cast<size_t>(kM * kQkvRows) * 2);
    DeviceBuffer y_head(static_cast<size_t>(kM * 4096) * 4);
    GemmParams qkv{kM,
                   kQkvRows,
                   kHidden,
                   x.as<core::Bf16>(),
                   kHidden,
                   w_qkv.as<core::Bf16>(),
                   bias.as<core::Bf16>(),
                   y_qkv.get(),
                   kQkvRows,
                   GemmOutDType::kBf16};
    GemmParams head{kM,      4096,         kHidden, x.as<core::Bf16>(), kHidden, w_head.as<core::Bf16>(),
                    nullptr, y_head.get(), 4096,    GemmOutDType::kF32};
    const std::vector<GemmShape> shapes = {qkv.shape(), head.shape()};
    gemm.prepare(shapes);

    Stream stream;
    // An unprepared shape is refused while the stream captures, and the capture stays usable.
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    GemmParams unprepared = qkv;
    unprepared.m = kM - 1;
    EXPECT_THROW(gemm.matmul(unprepared, stream.get()), core::Error);
    gemm.matmul(qkv, stream.get());
    gemm.matmul(head, stream.get());
    cudaGraph_t graph = nullptr;
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec_raw = nullptr;
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec_raw, graph, 0));
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    GraphExec exec(exec_raw);

    const auto hw_qkv = w_qkv.download<core::Bf16>(static_cast<size_t>(kQkvRows * kHidden));
    const auto hb = bias.download<core::Bf16>(static_cast<size_t>(kQkvRows));
    const auto hw_head = w_head.download<core::Bf16>(static_cast<size_t>(4096 * kHidden));
    std::mt19937 rng(5);
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(testing::Message() << "replay " << round);
        const auto hx = test::randomBf16(static_cast<size_t>(kM * kHidden), 1.0f, rng);
        x.upload(hx.data(), hx.size() * 2);
        y_qkv.poison();
        y_head.poison();
        AFD_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream.get()));
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        const auto got_qkv = y_qkv.download<core::Bf16>(static_cast<size_t>(kM * kQkvRows));
        const auto got_head = y_head.download<float>(static_cast<size_t>(kM * 4096));
        EXPECT_LT(test::relativeL2(bf16ToFloat(got_qkv), reference(hx, kM, kHidden, kHidden, hw_qkv, kQkvRows, hb)),
                  1e-2);
        EXPECT_LT(test::relativeL2(got_head, reference(hx, kM, kHidden, kHidden, hw_head, 4096, {})), 2e-4);
        // The replay computes what an eager call does, bit for bit.
        y_qkv.poison();
        y_head.poison();
        gemm.matmul(qkv, stream.get());
        gemm.matmul(head, stream.get());
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        EXPECT_EQ(std::memcmp(y_qkv.download<core::Bf16>(got_qkv.size()).data(), got_qkv.data(), got_qkv.size() * 2),
                  0);
        EXPECT_EQ(std::memcmp(y_head.download<float>(got_head.size()).data(), got_head.data(), got_head.size() * 4), 0);
    }
}

// --- Shape checks: host only -----------------------------------------------------------------------------------------

std::string checkMessage(const GemmParams& p) {
    try {
        checkGemmParams(p);
    } catch (const core::Error& e) {
        return e.what();
    }
    return "";
}

TEST(CublasLtGemmChecksTest, RefusesUnalignedShapesAndPointersNamingTheRule) {
    alignas(16) static core::Bf16 storage[64];
    GemmParams ok{4, 24, 16, storage, 16, storage, nullptr, storage, 24, GemmOutDType::kBf16};
    EXPECT_EQ(checkMessage(ok), "");
    GemmParams p = ok;
    p.k = 12;
    p.ldx = 16;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("K must be a multiple of 8"));
    p = ok;
    p.ldx = 12;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("ldx must be >= K"));
    p = ok;
    p.ldx = 20;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("ldx must be >= K and a multiple of 8"));
    p = ok;
    p.ldy = 20;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("ldy must be >= N"));
    p = ok;
    p.n = 20;
    p.ldy = 20;  // BF16 rows of 40 bytes
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("multiple of 8"));
    p.out_dtype = GemmOutDType::kF32;  // FP32 rows of 80 bytes
    EXPECT_EQ(checkMessage(p), "");
    p = ok;
    p.n = 0;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("N and K >= 1"));
    p = ok;
    p.x = storage + 4;  // 8 bytes off
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("16-byte aligned"));
    p = ok;
    p.bias = storage + 1;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("16-byte aligned"));
    p = ok;
    p.out_dtype = GemmOutDType::kF32;
    p.bias = storage;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("a bias needs BF16 y"));
    p = ok;
    p.y = nullptr;
    EXPECT_THAT(checkMessage(p), testing::HasSubstr("null"));
    p.m = 0;  // nothing to do: no pointer is read
    EXPECT_EQ(checkMessage(p), "");
}

}  // namespace
}  // namespace afd::kernels::cuda
