// The synthetic-weight kernels (kernels/device_random.h): every element bit for bit the host formula
// (model/synthetic_values.h) at any length and alignment, nothing written outside the tensor; the packed MLP drawn
// straight into the grouped GEMMs' layout equals moePackWeightsCuda of the row-major tensors drawn one by one
// (padding included, widths not a multiple of 32 packed at their packed width too); the argument checks (host only).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/device_random.h"
#include "kernels/moe_cuda.h"
#include "kernels_cuda/cuda_test_util.h"
#include "model/synthetic_values.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

TEST(DeviceRandomTest, FillMatchesTheHostFormulaAtAnyLengthAndAlignment) {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    constexpr int64_t kGuard = 16;  // poisoned elements either side
    for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{65536 + 13}, int64_t{300001}}) {
        for (const int64_t offset : {int64_t{0}, int64_t{1}, int64_t{3}}) {
            SCOPED_TRACE(testing::Message() << "count " << count << " offset " << offset);
            const uint64_t key = 0x1234567ull * static_cast<uint64_t>(count) + static_cast<uint64_t>(offset);
            const float centre = offset == 1 ? 1.0f : 0.0f;
            const float half_width = 0.2f + 0.01f * static_cast<float>(offset);
            DeviceBuffer buf(static_cast<size_t>(count + 2 * kGuard) * 2);
            buf.poison();
            SyntheticFillParams p;
            p.out = buf.as<core::Bf16>() + kGuard + offset;
            p.count = count;
            p.key = key;
            p.centre = centre;
            p.half_width = half_width;
            syntheticFillCuda(p, nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            const auto got = buf.download<uint16_t>(static_cast<size_t>(count + 2 * kGuard));
            int64_t wrong = 0, outside = 0;
            for (int64_t i = 0; i < count + 2 * kGuard; ++i) {
                const int64_t j = i - kGuard - offset;
                if (j >= 0 && j < count) {
                    wrong += got[static_cast<size_t>(i)] != model::syntheticValueBits(key, j, centre, half_width);
                } else {
                    outside += got[static_cast<size_t>(i)] != 0xFFFF;
                }
            }
            EXPECT_EQ(wrong, 0);
            EXPECT_EQ(outside, 0);
        }
    }
}

struct MlpShape {
    int64_t experts, hidden, inter;
};

TEST(DeviceRandomTest, PackedMlpEqualsThePackOfTheRowMajorTensors) {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    for (const MlpShape s : {MlpShape{3, 128, 96}, MlpShape{2, 64, 32}, MlpShape{1, 2048, 768}, MlpShape{4, 192, 160},
                             MlpShape{3, 64, 16}, MlpShape{2, 128, 44}, MlpShape{1, 64, 7}}) {
        SCOPED_TRACE(testing::Message() << "E " << s.experts << " H " << s.hidden << " I " << s.inter);
        std::vector<uint64_t> keys(static_cast<size_t>(3 * s.experts));
        for (size_t i = 0; i < keys.size(); ++i) keys[i] = model::syntheticMix(0xabcdefull + i);
        const float gate_up = std::sqrt(3.0f / static_cast<float>(s.hidden));
        const float down = std::sqrt(3.0f / static_cast<float>(s.inter));
        // Row-major: w13[e] = gate rows then up rows, w2[e] = down, each drawn as its own tensor.
        DeviceBuffer w13(static_cast<size_t>(s.experts * 2 * s.inter * s.hidden) * 2);
        DeviceBuffer w2(static_cast<size_t>(s.experts * s.hidden * s.inter) * 2);
        for (int64_t e = 0; e < s.experts; ++e) {
            for (int64_t j = 0; j < 3; ++j) {
                SyntheticFillParams p;
                p.count = s.inter * s.hidden;
                p.out = j < 2 ? w13.as<core::Bf16>() + (e * 2 + j) * p.count : w2.as<core::Bf16>() + e * p.count;
                p.key = keys[static_cast<size_t>(e * 3 + j)];
                p.half_width = j < 2 ? gate_up : down;
                syntheticFillCuda(p, nullptr);
            }
        }
        const MoePackedWeightBytes bytes = moePackedWeightBytes(s.experts, s.hidden, s.inter);
        DeviceBuffer want13(bytes.w13), want2(bytes.w2), got13(bytes.w13), got2(bytes.w2);
        want13.poison();
        want2.poison();
        got13.poison();
        got2.poison();
        moePackWeightsCuda(w13.as<core::Bf16>(), w2.as<core::Bf16>(), s.experts, s.hidden, s.inter,
                           want13.as<core::Bf16>(), want2.as<core::Bf16>(), nullptr);
        DeviceBuffer d_keys = DeviceBuffer::from(keys);
        SyntheticPackedMlpParams p;
        p.num_experts = s.experts;
        p.hidden = s.hidden;
        p.inter = s.inter;
        p.keys = d_keys.as<uint64_t>();
        p.gate_up_half_width = gate_up;
        p.down_half_width = down;
        p.w13_packed = got13.as<core::Bf16>();
        p.w2_packed = got2.as<core::Bf16>();
        syntheticPackedMlpCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const auto a13 = want13.download<uint16_t>(bytes.w13 / 2), b13 = got13.download<uint16_t>(bytes.w13 / 2);
        const auto a2 = want2.download<uint16_t>(bytes.w2 / 2), b2 = got2.download<uint16_t>(bytes.w2 / 2);
        EXPECT_TRUE(a13 == b13) << "w13 differs";
        EXPECT_TRUE(a2 == b2) << "w2 differs";
        EXPECT_EQ(std::count(b13.begin(), b13.end(), uint16_t{0xFFFF}), 0) << "w13 elements not written";
        EXPECT_EQ(std::count(b2.begin(), b2.end(), uint16_t{0xFFFF}), 0) << "w2 elements not written";
    }
}

TEST(DeviceRandomChecksTest, RefusesShapesThePackedLayoutCannotHold) {
    alignas(16) static core::Bf16 storage[16];
    static const uint64_t keys[3] = {1, 2, 3};
    SyntheticPackedMlpParams p;
    p.num_experts = 1;
    p.hidden = 96;  // not a multiple of 64
    p.inter = 32;
    p.keys = keys;
    p.w13_packed = storage;
    p.w2_packed = storage;
    EXPECT_THROW(syntheticPackedMlpCuda(p, nullptr), core::Error);
    p.hidden = 64;
    p.inter = 0;  // no width
    EXPECT_THROW(syntheticPackedMlpCuda(p, nullptr), core::Error);
    p.inter = 32;
    p.w2_packed = storage + 1;  // 2 bytes off
    EXPECT_THROW(syntheticPackedMlpCuda(p, nullptr), core::Error);
    p.num_experts = 0;  // nothing to draw: no pointer is read
    EXPECT_NO_THROW(syntheticPackedMlpCuda(p, nullptr));
    SyntheticFillParams f;
    f.count = 4;
    f.out = reinterpret_cast<core::Bf16*>(reinterpret_cast<char*>(storage) + 1);
    EXPECT_THROW(syntheticFillCuda(f, nullptr), core::Error);
}

}  // namespace
}  // namespace afd::kernels
