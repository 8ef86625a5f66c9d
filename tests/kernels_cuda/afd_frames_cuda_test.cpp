// The AFD frame kernels (kernels/afd_frames_cuda.h) against CPU arithmetic written here, on fresh random inputs with
// the outputs poisoned first: the per-FFN-rank split of a router's choices, the rank-order sum of partial sums (bit
// for bit: the same FP32 additions in the same order), and the FFN rank's check of the ids a frame carried.
#include <cuda_runtime.h>

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/afd_frames_cuda.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

TEST(AfdFramesCudaTest, SplitRoutingKeepsOnlyTheRanksExpertsAsLocalIds) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(11);
    const int64_t rows = 37, K = 8, E = 128;
    std::vector<int32_t> ids(rows * K);
    std::vector<float> weights(rows * K);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % (E + 1)) - 1;  // -1 (padding) too
    for (auto& w : weights) w = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    DeviceBuffer d_ids = DeviceBuffer::from(ids), d_w = DeviceBuffer::from(weights);
    DeviceBuffer out_ids(ids.size() * sizeof(int32_t)), out_w(weights.size() * sizeof(float));
    for (const auto& [begin, end] : {std::pair{0, 64}, std::pair{64, 128}, std::pair{43, 86}}) {
        out_ids.poison();
        out_w.poison();
        SplitRoutingParams p;
        p.rows = rows;
        p.top_k = K;
        p.begin = begin;
        p.end = end;
        p.ids = static_cast<const int32_t*>(d_ids.get());
        p.weights = static_cast<const float*>(d_w.get());
        p.local_ids = static_cast<int32_t*>(out_ids.get());
        p.local_weights = static_cast<float*>(out_w.get());
        splitRoutingCuda(p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto got_ids = out_ids.download<int32_t>(ids.size());
        const auto got_w = out_w.download<float>(weights.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            const bool here = ids[i] >= begin && ids[i] < end;
            EXPECT_EQ(got_ids[i], here ? ids[i] - begin : -1) << i;
            EXPECT_EQ(got_w[i], here ? weights[i] : 0.0f) << i;
        }
    }
}

TEST(AfdFramesCudaTest, SumPartialsAddsInRankOrderBitForBit) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(12);
    const int64_t rows = 5, cols = 2048;
    for (const int n : {1, 2, 3, 16}) {
        std::vector<std::vector<float>> partials(n, std::vector<float>(rows * cols));
        std::vector<DeviceBuffer> d;
        SumPartialsParams p;
        p.rows = rows;
        p.cols = cols;
        p.num_partials = n;
        for (int k = 0; k < n; ++k) {
            for (auto& v : partials[k]) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
            d.push_back(DeviceBuffer::from(partials[k]));
            p.partials[k] = static_cast<const float*>(d.back().get());
        }
        DeviceBuffer out(rows * cols * sizeof(float));
        out.poison();
        p.out = static_cast<float*>(out.get());
        sumPartialsCuda(p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto got = out.download<float>(rows * cols);
        for (int64_t i = 0; i < rows * cols; ++i) {
            float want = 0.0f;
            for (int k = 0; k < n; ++k) want += partials[k][i];
            ASSERT_EQ(got[i], want) << "partials " << n << " element " << i;
        }
    }
}

TEST(AfdFramesCudaTest, CheckLocalIdsRoutesBadIdsNowhereAndRecordsTheFirst) {
    AFD_REQUIRE_SM90();
    std::vector<int32_t> ids = {0, 5, -1, 63, 64, 7, -2, 3};
    DeviceBuffer d_ids = DeviceBuffer::from(ids);
    DeviceBuffer bad = DeviceBuffer::from(std::vector<int32_t>{0, 0, 0, 0});
    CheckLocalIdsParams p;
    p.count = static_cast<int64_t>(ids.size());
    p.num_local = 64;
    p.layer = 9;
    p.ids = static_cast<int32_t*>(d_ids.get());
    p.bad = static_cast<int32_t*>(bad.get());
    checkLocalIdsCuda(p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_ids.download<int32_t>(ids.size()), (std::vector<int32_t>{0, 5, -1, 63, -1, 7, -1, 3}));
    const auto record = bad.download<int32_t>(4);
    EXPECT_EQ(record[0], 1);
    EXPECT_EQ(record[1], 9);
    EXPECT_TRUE((record[2] == 4 && record[3] == 64) || (record[2] == 6 && record[3] == -2)) << record[2];
    // Good ids leave the record untouched.
    DeviceBuffer good = DeviceBuffer::from(std::vector<int32_t>{0, 63, -1});
    DeviceBuffer clean = DeviceBuffer::from(std::vector<int32_t>{0, 0, 0, 0});
    p.count = 3;
    p.ids = static_cast<int32_t*>(good.get());
    p.bad = static_cast<int32_t*>(clean.get());
    checkLocalIdsCuda(p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(clean.download<int32_t>(4)[0], 0);
}

}  // namespace
}  // namespace afd::kernels
