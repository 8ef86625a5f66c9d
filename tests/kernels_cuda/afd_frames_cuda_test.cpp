// The AFD frame kernels (kernels/afd_frames_cuda.h) against CPU arithmetic written here, on fresh random inputs with
// the outputs poisoned first: the per-FFN-rank split of a router's choices, the rank-order sum of partial sums (bit
// for bit: the same FP32 additions in the same order), and the FFN rank's gather of its frames (padding, id check,
// counts).
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

// Three peers' frames (one empty) gathered into a padded batch, against the same gather written here.
TEST(AfdFramesCudaTest, GatherFfnRowsConcatenatesPadsChecksAndCountsThePeersRows) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(13);
    const int64_t H = 2048, K = 8, num_local = 64, padded = 32;
    const std::vector<int64_t> rows = {5, 0, 11};
    std::vector<std::vector<uint16_t>> x(rows.size());
    std::vector<std::vector<int32_t>> ids(rows.size());
    std::vector<std::vector<float>> weights(rows.size());
    std::vector<DeviceBuffer> d;
    for (const GatheredRouting routing :
         {GatheredRouting::kFromFrames, GatheredRouting::kDense, GatheredRouting::kRouterHere}) {
        const int64_t k_used = routing == GatheredRouting::kDense ? 1 : K;
        GatherFfnRowsParams p;
        d.clear();
        for (size_t k = 0; k < rows.size(); ++k) {
            x[k].resize(rows[k] * H);
            ids[k].resize(rows[k] * K);
            weights[k].resize(rows[k] * K);
            for (auto& v : x[k]) v = static_cast<uint16_t>(rng());
            for (auto& id : ids[k]) id = static_cast<int32_t>(rng() % (num_local + 1)) - 1;
            for (auto& w : weights[k]) w = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
            if (k == 2) {
                ids[k][3] = static_cast<int32_t>(num_local);  // out of range: one bad id
                ids[k][9] = -7;
            }
            if (rows[k] == 0) continue;
            p.x[p.num_peers] = static_cast<const uint16_t*>(d.emplace_back(DeviceBuffer::from(x[k])).get());
            p.ids[p.num_peers] = static_cast<const int32_t*>(d.emplace_back(DeviceBuffer::from(ids[k])).get());
            p.weights[p.num_peers] = static_cast<const float*>(d.emplace_back(DeviceBuffer::from(weights[k])).get());
            p.rows[p.num_peers] = rows[k];
            ++p.num_peers;
        }
        DeviceBuffer out_x(padded * H * sizeof(uint16_t)), out_ids(padded * k_used * sizeof(int32_t)),
            out_w(padded * k_used * sizeof(float));
        out_x.poison();
        out_ids.poison();
        out_w.poison();
        DeviceBuffer bad = DeviceBuffer::from(std::vector<int32_t>{0, 0, 0, 0});
        DeviceBuffer counts = DeviceBuffer::from(std::vector<uint64_t>(num_local, 3));
        DeviceBuffer valid = DeviceBuffer::from(std::vector<int32_t>{-5});
        p.hidden = H;
        p.top_k = k_used;
        p.padded_rows = padded;
        p.routing = routing;
        p.num_local = static_cast<int32_t>(num_local);
        p.layer = 4;
        p.out_x = static_cast<uint16_t*>(out_x.get());
        p.out_ids = routing == GatheredRouting::kRouterHere ? nullptr : static_cast<int32_t*>(out_ids.get());
        p.out_weights = routing == GatheredRouting::kRouterHere ? nullptr : static_cast<float*>(out_w.get());
        p.bad = static_cast<int32_t*>(bad.get());
        p.counts = routing == GatheredRouting::kFromFrames ? static_cast<uint64_t*>(counts.get()) : nullptr;
        p.valid_rows = static_cast<int32_t*>(valid.get());
        gatherFfnRowsCuda(p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

        std::vector<uint16_t> want_x(padded * H, 0);
        std::vector<int32_t> want_ids(padded * k_used, -1);
        std::vector<float> want_w(padded * k_used, 0.0f);
        std::vector<uint64_t> want_counts(num_local, 3);
        int64_t row = 0;
        for (size_t k = 0; k < rows.size(); ++k) {
            std::copy(x[k].begin(), x[k].end(), want_x.begin() + row * H);
            for (int64_t j = 0; j < rows[k] * k_used; ++j) {
                const int64_t at = row * k_used + j;
                if (routing == GatheredRouting::kDense) {
                    want_ids[at] = 0;
                    want_w[at] = 1.0f;
                } else if (ids[k][j] >= -1 && ids[k][j] < num_local) {
                    want_ids[at] = ids[k][j];
                    want_w[at] = weights[k][j];
                    if (ids[k][j] >= 0) ++want_counts[ids[k][j]];
                }
            }
            row += rows[k];
        }
        const char* name = routing == GatheredRouting::kFromFrames ? "frames"
                           : routing == GatheredRouting::kDense    ? "dense"
                                                                   : "router here";
        EXPECT_EQ(out_x.download<uint16_t>(padded * H), want_x) << name;
        EXPECT_EQ(valid.download<int32_t>(1)[0], row) << name;
        if (routing == GatheredRouting::kRouterHere) continue;
        EXPECT_EQ(out_ids.download<int32_t>(padded * k_used), want_ids) << name;
        EXPECT_EQ(out_w.download<float>(padded * k_used), want_w) << name;
        const auto record = bad.download<int32_t>(4);
        if (routing == GatheredRouting::kDense) {
            EXPECT_EQ(record[0], 0);
            continue;
        }
        EXPECT_EQ(counts.download<uint64_t>(num_local), want_counts);
        // The bad entries are the third peer's 3 and 9, at batch entries (5 + 0) * K + 3 and + 9.
        EXPECT_EQ(record[0], 1);
        EXPECT_EQ(record[1], 4);
        EXPECT_TRUE((record[2] == 5 * K + 3 && record[3] == num_local) || (record[2] == 5 * K + 9 && record[3] == -7))
            << record[2] << " " << record[3];
    }
}

}  // namespace
}  // namespace afd::kernels
