// Harness of the attention side's small device ops against their CPU references, on fresh random inputs with the
// outputs poisoned (NaN) before each run: embedding gather (ids outside the vocabulary give zero rows), fused residual
// add + RMSNorm (every delta kind, with and without bias, the selected-rows final norm), the bf16 <-> fp32
// conversions (bit for bit against core/bf16.h), the masking of padded routing rows (num_valid read on the device,
// also across graph replays), and all of them captured in one CUDA graph and replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/dense_cuda.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

constexpr double kBf16Tolerance = 1e-2;

std::vector<float> randomFloats(size_t count, float scale, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(count);
    for (auto& e : v) {
        e = dist(rng);
    }
    return v;
}

bool allFinite(const std::vector<float>& v) {
    for (float e : v) {
        if (!std::isfinite(e)) {
            return false;
        }
    }
    return true;
}

uint32_t bitsOf(float v) {
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    return b;
}

TEST(EmbeddingCudaTest, GathersRowsAndZeroesIdsOutsideTheVocabulary) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(11);
    struct Case {
        int64_t tokens, vocab, hidden;
    };
    for (const Case c : {Case{1, 384, 64}, Case{37, 384, 64}, Case{9, 4096, 2048}, Case{300, 1000, 2048},
                         Case{3, 64, 8192}, Case{5, 17, 8}}) {
        SCOPED_TRACE(testing::Message() << "T " << c.tokens << " V " << c.vocab << " H " << c.hidden);
        const auto table = test::randomBf16(static_cast<size_t>(c.vocab * c.hidden), 2.0f, rng);
        std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(c.vocab - 1));
        std::vector<int32_t> ids(static_cast<size_t>(c.tokens));
        for (auto& id : ids) {
            id = any_id(rng);
        }
        // Ids outside [0, V): the kernel must not read them and writes zeros.
        const std::vector<int32_t> bad = {-1, static_cast<int32_t>(c.vocab), std::numeric_limits<int32_t>::max(),
                                          std::numeric_limits<int32_t>::min()};
        std::vector<bool> is_bad(ids.size(), false);
        for (size_t i = 0; i < bad.size() && 2 * i < ids.size(); ++i) {
            ids[2 * i] = bad[i];
            is_bad[2 * i] = true;
        }
        std::vector<float> want(static_cast<size_t>(c.tokens * c.hidden), 0.0f);
        std::vector<int32_t> good_ids = ids;
        for (size_t t = 0; t < ids.size(); ++t) {
            if (is_bad[t]) {
                good_ids[t] = 0;
            }
        }
        embeddingCpu({c.tokens, c.vocab, c.hidden, good_ids.data(), table.data(), want.data()});
        for (size_t t = 0; t < ids.size(); ++t) {
            if (is_bad[t]) {
                std::fill(want.begin() + static_cast<int64_t>(t) * c.hidden,
                          want.begin() + static_cast<int64_t>(t + 1) * c.hidden, 0.0f);
            }
        }
        DeviceBuffer d_ids = DeviceBuffer::from(ids);
        DeviceBuffer d_table = DeviceBuffer::from(table);
        DeviceBuffer d_out(want.size() * 4);
        d_out.poison();
        embeddingCuda({c.tokens, c.vocab, c.hidden, d_ids.as<int32_t>(), d_table.as<core::Bf16>(), d_out.as<float>()},
                      nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got = d_out.download<float>(want.size());
        ASSERT_TRUE(allFinite(got)) << "an element was not written";
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(bitsOf(got[i]), bitsOf(want[i])) << "element " << i;
        }
    }
}

enum class DeltaKind { kNone, kBf16, kF32 };

struct NormCase {
    int64_t tokens, hidden;
    DeltaKind delta;
    bool bias;
};

TEST(AddRmsNormCudaTest, MatchesCpuForEveryDeltaKind) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(12);
    std::vector<NormCase> cases;
    for (const DeltaKind d : {DeltaKind::kNone, DeltaKind::kBf16, DeltaKind::kF32}) {
        for (const bool bias : {false, true}) {
            if (d == DeltaKind::kNone && bias) {
                continue;
            }
            for (const auto& [t, h] : std::vector<std::pair<int64_t, int64_t>>{{1, 64},
                                                                               {13, 64},
                                                                               {1, 2048},
                                                                               {64, 2048},
                                                                               {300, 2048},
                                                                               {3, 4096},
                                                                               {5, 8192},
                                                                               {2, 24},
                                                                               {2, 16384},
                                                                               {1, 32768}}) {
                cases.push_back({t, h, d, bias});
            }
        }
    }
    for (const NormCase& c : cases) {
        SCOPED_TRACE(testing::Message() << "T " << c.tokens << " H " << c.hidden << " delta "
                                        << static_cast<int>(c.delta) << " bias " << c.bias);
        const size_t n = static_cast<size_t>(c.tokens * c.hidden);
        const auto residual = randomFloats(n, 3.0f, rng);
        const auto weight = test::randomBf16(static_cast<size_t>(c.hidden), 1.5f, rng);
        const auto bias = test::randomBf16(static_cast<size_t>(c.hidden), 0.5f, rng);
        const auto delta_bf16 = test::randomBf16(n, 2.0f, rng);
        const auto delta_f32 = randomFloats(n, 2.0f, rng);
        const float eps = 1e-6f;

        std::vector<float> want_residual = residual;
        if (c.delta != DeltaKind::kNone) {
            for (size_t i = 0; i < n; ++i) {
                float d = c.delta == DeltaKind::kBf16 ? delta_bf16[i].toFloat() : delta_f32[i];
                if (c.bias) {
                    d += bias[i % static_cast<size_t>(c.hidden)].toFloat();
                }
                want_residual[i] += d;
            }
        }
        std::vector<float> want_out(n);
        rmsNormCpu({c.tokens, c.hidden, eps, want_residual.data(), weight.data(), want_out.data()});

        DeviceBuffer d_residual = DeviceBuffer::from(residual);
        DeviceBuffer d_weight = DeviceBuffer::from(weight);
        DeviceBuffer d_bias = DeviceBuffer::from(bias);
        DeviceBuffer d_delta =
            c.delta == DeltaKind::kF32 ? DeviceBuffer::from(delta_f32) : DeviceBuffer::from(delta_bf16);
        DeviceBuffer d_out(n * 2);
        d_out.poison();
        AddRmsNormParams p;
        p.num_tokens = c.tokens;
        p.hidden = c.hidden;
        p.eps = eps;
        p.residual = d_residual.as<float>();
        p.delta = c.delta == DeltaKind::kNone ? nullptr : d_delta.get();
        p.delta_dtype = c.delta == DeltaKind::kF32 ? ActDType::kF32 : ActDType::kBf16;
        p.bias = c.bias ? d_bias.as<core::Bf16>() : nullptr;
        p.weight = d_weight.as<core::Bf16>();
        p.out = d_out.as<core::Bf16>();
        addRmsNormCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got_residual = d_residual.download<float>(n);
        const auto got_out = test::toFloat(d_out.download<core::Bf16>(n));
        ASSERT_TRUE(allFinite(got_out)) << "an element was not written";
        EXPECT_LT(test::relativeL2(got_residual, want_residual), 1e-6);
        EXPECT_LT(test::relativeL2(got_out, want_out), kBf16Tolerance);
    }
}

TEST(AddRmsNormCudaTest, SelectedRowsAreNormalisedAndResidualIsUntouched) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(13);
    for (const int64_t hidden : {int64_t{64}, int64_t{2048}}) {
        SCOPED_TRACE(testing::Message() << "H " << hidden);
        const int64_t tokens = 40;
        const auto residual = randomFloats(static_cast<size_t>(tokens * hidden), 2.0f, rng);
        const auto weight = test::randomBf16(static_cast<size_t>(hidden), 1.0f, rng);
        // Repeats, the last row, and rows outside the batch (zero rows of out).
        const std::vector<int32_t> rows = {39, 0, 7, 7, -1, 40, 12, 1000};
        const int64_t num_rows = static_cast<int64_t>(rows.size());
        std::vector<float> want(static_cast<size_t>(num_rows * hidden), 0.0f);
        for (int64_t r = 0; r < num_rows; ++r) {
            const int32_t t = rows[static_cast<size_t>(r)];
            if (t < 0 || t >= tokens) {
                continue;
            }
            rmsNormCpu({1, hidden, 1e-5f, residual.data() + t * hidden, weight.data(), want.data() + r * hidden});
        }
        DeviceBuffer d_residual = DeviceBuffer::from(residual);
        DeviceBuffer d_weight = DeviceBuffer::from(weight);
        DeviceBuffer d_rows = DeviceBuffer::from(rows);
        DeviceBuffer d_out(want.size() * 2);
        d_out.poison();
        AddRmsNormParams p;
        p.num_tokens = tokens;
        p.hidden = hidden;
        p.eps = 1e-5f;
        p.residual = d_residual.as<float>();
        p.weight = d_weight.as<core::Bf16>();
        p.rows = d_rows.as<int32_t>();
        p.num_rows = num_rows;
        p.out = d_out.as<core::Bf16>();
        addRmsNormCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got = test::toFloat(d_out.download<core::Bf16>(want.size()));
        ASSERT_TRUE(allFinite(got)) << "an element was not written";
        EXPECT_LT(test::relativeL2(got, want), kBf16Tolerance);
        for (int64_t r = 0; r < num_rows; ++r) {
            const int32_t t = rows[static_cast<size_t>(r)];
            if (t < 0 || t >= tokens) {
                for (int64_t i = 0; i < hidden; ++i) {
                    ASSERT_EQ(got[static_cast<size_t>(r * hidden + i)], 0.0f) << "row " << r;
                }
            }
        }
        const auto after = d_residual.download<float>(residual.size());
        for (size_t i = 0; i < after.size(); ++i) {
            ASSERT_EQ(bitsOf(after[i]), bitsOf(residual[i])) << "residual changed at " << i;
        }
    }
}

std::vector<float> castTestValues(size_t count, std::mt19937& rng) {
    std::vector<float> v = randomFloats(count, 100.0f, rng);
    const std::vector<float> special = {0.0f,
                                        -0.0f,
                                        std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        std::numeric_limits<float>::quiet_NaN(),
                                        std::numeric_limits<float>::denorm_min(),
                                        std::numeric_limits<float>::max(),
                                        1.00390625f /* halfway between two bf16: rounds to even */,
                                        1.01171875f /* halfway, rounds up to even */,
                                        -3.0e38f,
                                        1.0e-40f};
    for (size_t i = 0; i < special.size() && i < v.size(); ++i) {
        v[i * 3 % v.size()] = special[i];
    }
    return v;
}

TEST(CastCudaTest, ConvertsBitForBitInBothDirections) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(14);
    for (const int64_t count :
         {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1000}, int64_t{4099}, (int64_t{1} << 20) + 3}) {
        SCOPED_TRACE(testing::Message() << "count " << count);
        const auto values = castTestValues(static_cast<size_t>(count), rng);
        std::vector<uint16_t> want_bf16(values.size());
        for (size_t i = 0; i < values.size(); ++i) {
            want_bf16[i] = core::floatToBf16Bits(values[i]);
        }
        DeviceBuffer d_f32 = DeviceBuffer::from(values);
        DeviceBuffer d_bf16(values.size() * 2);
        DeviceBuffer d_back(values.size() * 4);
        d_bf16.poison();
        d_back.poison();
        castCuda({count, ActDType::kF32, ActDType::kBf16, d_f32.get(), d_bf16.get()}, nullptr);
        castCuda({count, ActDType::kBf16, ActDType::kF32, d_bf16.get(), d_back.get()}, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got_bf16 = d_bf16.download<uint16_t>(values.size());
        const auto got_back = d_back.download<float>(values.size());
        for (size_t i = 0; i < values.size(); ++i) {
            ASSERT_EQ(got_bf16[i], want_bf16[i]) << "element " << i << " value " << values[i];
            ASSERT_EQ(bitsOf(got_back[i]), bitsOf(core::bf16BitsToFloat(want_bf16[i]))) << "element " << i;
        }
        // The same dtype is a copy.
        DeviceBuffer d_copy(values.size() * 4);
        d_copy.poison();
        castCuda({count, ActDType::kF32, ActDType::kF32, d_f32.get(), d_copy.get()}, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto copy = d_copy.download<float>(values.size());
        EXPECT_EQ(std::memcmp(copy.data(), values.data(), values.size() * 4), 0);
    }
}

TEST(MaskPaddedRowsCudaTest, MasksRowsFromTheDeviceCountAlsoAcrossGraphReplays) {
    AFD_REQUIRE_SM90();
    const int64_t rows = 16;
    const int64_t top_k = 8;
    std::vector<int32_t> ids(static_cast<size_t>(rows * top_k));
    std::vector<float> weights(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<int32_t>(i % 128);
        weights[i] = 0.25f + static_cast<float>(i);
    }
    DeviceBuffer d_ids(ids.size() * 4);
    DeviceBuffer d_weights(weights.size() * 4);
    DeviceBuffer d_valid(4);
    cudaStream_t stream = nullptr;
    AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MaskPaddedRowsParams p{rows, top_k, d_valid.as<int32_t>(), d_ids.as<int32_t>(), d_weights.as<float>()};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    maskPaddedRowsCuda(p, stream);
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const bool replay : {false, true}) {
        for (const int32_t valid : {0, 5, 16, 20, -3}) {
            SCOPED_TRACE(testing::Message() << "num_valid " << valid << " replay " << replay);
            d_ids.upload(ids.data(), ids.size() * 4);
            d_weights.upload(weights.data(), weights.size() * 4);
            d_valid.upload(&valid, 4);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads ran on the default stream
            if (replay) {
                AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            } else {
                maskPaddedRowsCuda(p, stream);
            }
            AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
            const auto got_ids = d_ids.download<int32_t>(ids.size());
            const auto got_weights = d_weights.download<float>(weights.size());
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t j = 0; j < top_k; ++j) {
                    const size_t i = static_cast<size_t>(r * top_k + j);
                    if (r >= valid) {
                        ASSERT_EQ(got_ids[i], -1) << "row " << r;
                        ASSERT_EQ(got_weights[i], 0.0f) << "row " << r;
                    } else {
                        ASSERT_EQ(got_ids[i], ids[i]) << "row " << r;
                        ASSERT_EQ(got_weights[i], weights[i]) << "row " << r;
                    }
                }
            }
        }
    }
    AFD_CUDA_CHECK(cudaGraphExecDestroy(exec));
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    AFD_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace afd::kernels
