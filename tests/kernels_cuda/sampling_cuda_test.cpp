// Device sampling against the CPU references: greedy equals argmaxCpu bit for bit (random rows, ties, NaN, infinities,
// signed zeros; vocabularies that are and are not multiples of 4, up to Qwen3's 151936), top_k 1 equals greedy, a
// seeded row draws the same id alone and in a batch of 64, every sampled id lies in the CPU sampler's nucleus (on the
// fast path and on the radix-select path, full vocabulary), and a captured graph replays to the same ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/sampling.h"
#include "kernels/sampling_cuda.h"
#include "kernels_cuda/cuda_test_util.h"
#include "kernels_cuda/sampling_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;
using test::RowSampling;

constexpr int64_t kQwenVocab = 151936;

std::vector<float> normalRow(int64_t vocab, float stddev, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (auto& v : row) {
        v = dist(rng);
    }
    return row;
}

// Rows that stress argmax's rules, each of `vocab` values.
std::vector<std::vector<float>> greedyRows(int64_t vocab, std::mt19937& rng) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    std::uniform_int_distribution<int64_t> any(0, vocab - 1);
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < 8; ++i) {
        rows.push_back(normalRow(vocab, 3.0f, rng));
    }
    auto ties = normalRow(vocab, 1.0f, rng);  // the maximum three times
    for (int i = 0; i < 3; ++i) {
        ties[static_cast<size_t>(any(rng))] = 9.0f;
    }
    rows.push_back(ties);
    auto nan_first = normalRow(vocab, 1.0f, rng);
    nan_first[0] = nan;
    for (int i = 0; i < 5; ++i) {
        nan_first[static_cast<size_t>(any(rng))] = nan;
    }
    rows.push_back(nan_first);
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), nan));   // all NaN: index 0
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -inf));  // all -inf: index 0
    auto nan_and_neg_inf = std::vector<float>(static_cast<size_t>(vocab), nan);
    nan_and_neg_inf[static_cast<size_t>(vocab - 1)] = -inf;
    rows.push_back(nan_and_neg_inf);
    auto pos_inf = normalRow(vocab, 1.0f, rng);
    pos_inf[static_cast<size_t>(vocab / 2)] = inf;
    pos_inf[static_cast<size_t>(vocab - 1)] = inf;
    rows.push_back(pos_inf);
    auto zeros = std::vector<float>(static_cast<size_t>(vocab), -1.0f);  // -0 before +0: equal, the first wins
    zeros[static_cast<size_t>(vocab - 1)] = 0.0f;
    zeros[static_cast<size_t>(vocab / 3)] = -0.0f;
    rows.push_back(zeros);
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), 0.25f));  // all equal
    return rows;
}

TEST(SamplingCudaTest, GreedyMatchesArgmaxCpuBitForBit) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(31);
    for (const int64_t vocab : {int64_t{1}, int64_t{16}, int64_t{384}, int64_t{1001}, int64_t{5003}, kQwenVocab}) {
        SCOPED_TRACE(testing::Message() << "V " << vocab);
        const auto rows = greedyRows(vocab, rng);
        std::vector<float> logits;
        std::vector<int32_t> want;
        for (const auto& row : rows) {
            logits.insert(logits.end(), row.begin(), row.end());
            want.push_back(argmaxCpu(row.data(), vocab));
        }
        const int64_t num_rows = static_cast<int64_t>(rows.size());
        // No per-row arrays: every row greedy.
        DeviceBuffer d_logits = DeviceBuffer::from(logits);
        DeviceBuffer d_out(static_cast<size_t>(num_rows) * 4);
        d_out.poison();
        SampleTokensParams p;
        p.num_rows = num_rows;
        p.vocab_size = vocab;
        p.logits = d_logits.as<float>();
        p.out_ids = d_out.as<int32_t>();
        sampleTokensCuda(p, nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(d_out.download<int32_t>(want.size()), want);
        // Temperature 0 with top-k / top-p set, and top_k 1 with a temperature: greedy too.
        std::vector<RowSampling> zero_temperature(rows.size());
        std::vector<RowSampling> top_one(rows.size());
        for (size_t r = 0; r < rows.size(); ++r) {
            zero_temperature[r] = RowSampling{0.0f, static_cast<int32_t>(r % 3) * 20, 0.5f, r, r};
            top_one[r] = RowSampling{0.7f + 0.1f * static_cast<float>(r % 5), 1, r % 2 == 0 ? 1.0f : 0.3f, r, 3 * r};
        }
        EXPECT_EQ(test::sampleOnDevice(logits, vocab, zero_temperature), want);
        EXPECT_EQ(test::sampleOnDevice(logits, vocab, top_one), want);
    }
}

// Settings that take each path of the kernel on a full-vocabulary row.
std::vector<RowSampling> pathSettings() {
    return {
        {0.8f, 0, 1.0f, 1, 0},     // temperature alone
        {0.7f, 50, 1.0f, 2, 0},    // top-k (candidate bound)
        {1.0f, 50, 0.9f, 3, 0},    // top-k and top-p
        {1.0f, 0, 0.9f, 4, 0},     // top-p alone
        {1.0f, 2000, 1.0f, 5, 0},  // top-k above the bound's reach: radix select
        {1.0f, 2000, 0.5f, 6, 0},  // radix select, both thresholds
        {0.3f, 1024, 0.99f, 7, 0}, {2.5f, 0, 0.97f, 8, 0},
    };
}

TEST(SamplingCudaTest, SeededRowDrawsTheSameIdAloneAndInABatch) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(32);
    const auto row = normalRow(kQwenVocab, 2.0f, rng);
    const auto flat_row = normalRow(kQwenVocab, 0.2f, rng);
    std::vector<std::vector<float>> others;
    for (int r = 0; r < 63; ++r) {
        others.push_back(normalRow(kQwenVocab, 1.0f + static_cast<float>(r % 4), rng));
    }
    for (const auto* logits_row : {&row, &flat_row}) {
        for (RowSampling target : pathSettings()) {
            target.offset = 41;
            SCOPED_TRACE(testing::Message()
                         << "T " << target.temperature << " k " << target.top_k << " p " << target.top_p);
            const auto alone = test::sampleOnDevice(*logits_row, kQwenVocab, {target});
            // A batch of 64 rows of other logits and settings, the target at row 37.
            std::vector<float> batch;
            std::vector<RowSampling> settings;
            const auto paths = pathSettings();
            for (int r = 0; r < 64; ++r) {
                if (r == 37) {
                    batch.insert(batch.end(), logits_row->begin(), logits_row->end());
                    settings.push_back(target);
                } else {
                    const auto& other = others[static_cast<size_t>(r < 37 ? r : r - 1)];
                    batch.insert(batch.end(), other.begin(), other.end());
                    RowSampling s = paths[static_cast<size_t>(r) % paths.size()];
                    s.seed = static_cast<uint64_t>(r) * 977;
                    s.offset = static_cast<uint64_t>(r);
                    settings.push_back(s);
                }
            }
            const auto in_batch = test::sampleOnDevice(batch, kQwenVocab, settings);
            EXPECT_EQ(in_batch[37], alone[0]);
            EXPECT_EQ(test::sampleOnDevice(batch, kQwenVocab, settings), in_batch) << "not deterministic";
        }
    }
}

TEST(SamplingCudaTest, SampledIdsLieInTheCpuNucleus) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(33);
    struct RowKind {
        int64_t vocab;
        float stddev;
    };
    for (const RowKind kind :
         {RowKind{kQwenVocab, 3.0f}, RowKind{kQwenVocab, 0.3f}, RowKind{1001, 2.0f}, RowKind{5003, 1.0f}}) {
        const auto row = normalRow(kind.vocab, kind.stddev, rng);
        for (RowSampling s : pathSettings()) {
            SCOPED_TRACE(testing::Message() << "V " << kind.vocab << " stddev " << kind.stddev << " T " << s.temperature
                                            << " k " << s.top_k << " p " << s.top_p);
            // The nucleus with top_p slightly raised: float rounding on the device may include one more id.
            const auto nucleus = test::referenceNucleus(row.data(), kind.vocab, s, 1.0 + 1e-4);
            std::vector<bool> allowed(static_cast<size_t>(kind.vocab), false);
            for (const int32_t id : nucleus.ids) {
                allowed[static_cast<size_t>(id)] = true;
            }
            std::vector<RowSampling> settings(128, s);
            for (size_t r = 0; r < settings.size(); ++r) {
                settings[r].offset = r;
            }
            const auto ids = test::sampleOnDevice(row, kind.vocab, settings);
            std::vector<int32_t> distinct = ids;
            std::sort(distinct.begin(), distinct.end());
            distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
            for (const int32_t id : ids) {
                ASSERT_TRUE(id >= 0 && id < kind.vocab) << "id " << id;
                ASSERT_TRUE(allowed[static_cast<size_t>(id)])
                    << "id " << id << " outside the nucleus of " << nucleus.ids.size();
            }
            if (nucleus.ids.size() > 8 && nucleus.probs[0] < 0.5) {
                EXPECT_GT(distinct.size(), 4u) << "the offsets do not change the draw";
            }
        }
    }
}

TEST(SamplingCudaTest, GraphReplayDrawsAsEager) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(34);
    const int64_t rows = 8;
    std::vector<float> logits;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = normalRow(kQwenVocab, 2.0f, rng);
        logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<float> temperature = {0.0f, 0.7f, 1.0f, 1.0f, 1.0f, 1.2f, 0.9f, 1.0f};
    std::vector<int32_t> top_k = {0, 50, 0, 20, 2000, 0, 1, 0};
    std::vector<float> top_p = {1.0f, 1.0f, 0.9f, 0.8f, 0.6f, 1.0f, 1.0f, 0.95f};
    std::vector<uint64_t> seed = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<uint64_t> offset(rows, 0);
    DeviceBuffer d_logits = DeviceBuffer::from(logits);
    DeviceBuffer d_temperature = DeviceBuffer::from(temperature);
    DeviceBuffer d_top_k = DeviceBuffer::from(top_k);
    DeviceBuffer d_top_p = DeviceBuffer::from(top_p);
    DeviceBuffer d_seed = DeviceBuffer::from(seed);
    DeviceBuffer d_offset = DeviceBuffer::from(offset);
    DeviceBuffer d_out(rows * 4);
    SampleTokensParams p{rows,
                         kQwenVocab,
                         d_logits.as<float>(),
                         d_temperature.as<float>(),
                         d_top_k.as<int32_t>(),
                         d_top_p.as<float>(),
                         d_seed.as<uint64_t>(),
                         d_offset.as<uint64_t>(),
                         d_out.as<int32_t>()};
    cudaStream_t stream = nullptr;
    AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    sampleTokensCuda(p, stream);
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (uint64_t step = 0; step < 4; ++step) {
        std::fill(offset.begin(), offset.end(), step);
        d_offset.upload(offset.data(), offset.size() * 8);
        d_out.poison();
        AFD_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and memsets ran on the default stream
        sampleTokensCuda(p, stream);
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto eager = d_out.download<int32_t>(rows);
        d_out.poison();
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_EQ(d_out.download<int32_t>(rows), eager) << "step " << step;
    }
    AFD_CUDA_CHECK(cudaGraphExecDestroy(exec));
    AFD_CUDA_CHECK(cudaGraphDestroy(graph));
    AFD_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace afd::kernels
