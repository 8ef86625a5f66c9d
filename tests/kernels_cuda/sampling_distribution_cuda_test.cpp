// Device sampling draws against the CPU sampler's distribution: 20,000 draws per configuration (offsets 0 .. 19,999 of
// one seed), each id's (or each bucket of ids') frequency within 5 standard deviations of its CPU probability, and no
// id outside the top-k / nucleus ever drawn. Small vocabularies with chosen logits (ties at the top-k and nucleus
// boundaries; temperature alone, top-k, top-p, both), a medium one on the candidate-bound path, and rows built to take
// the radix-select path (top_k above 1024; nuclei of thousands of tied logits) and the long ordered draw of
// temperature alone over a large row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_info.h"
#include "kernels_cuda/cuda_test_util.h"
#include "kernels_cuda/sampling_test_util.h"

namespace afd::kernels {
namespace {

using test::RowSampling;

constexpr int kDraws = 20000;
constexpr int kRowsPerLaunch = 2000;

// kDraws draws of one row with settings s, offsets 0 .. kDraws - 1.
std::vector<int32_t> drawMany(const std::vector<float>& row, const RowSampling& s) {
    const int64_t vocab = static_cast<int64_t>(row.size());
    std::vector<int32_t> draws;
    for (int first = 0; first < kDraws; first += kRowsPerLaunch) {
        std::vector<RowSampling> settings(kRowsPerLaunch, s);
        for (int r = 0; r < kRowsPerLaunch; ++r) {
            settings[static_cast<size_t>(r)].offset = static_cast<uint64_t>(first + r);
        }
        const auto ids = test::sampleOnDevice(row, vocab, settings);
        draws.insert(draws.end(), ids.begin(), ids.end());
    }
    return draws;
}

// Every draw has a positive CPU probability; the frequency of each bucket of ids (bucket = id / bucket_size) is within
// 5 standard deviations (plus 1e-3 for the device's float rounding) of the CPU probability.
void expectDistribution(const std::vector<int32_t>& draws, const std::vector<double>& p, int64_t bucket_size) {
    const int64_t vocab = static_cast<int64_t>(p.size());
    const int64_t buckets = (vocab + bucket_size - 1) / bucket_size;
    std::vector<double> want(static_cast<size_t>(buckets), 0.0);
    std::vector<double> got(static_cast<size_t>(buckets), 0.0);
    for (int64_t id = 0; id < vocab; ++id) {
        want[static_cast<size_t>(id / bucket_size)] += p[static_cast<size_t>(id)];
    }
    for (const int32_t id : draws) {
        ASSERT_TRUE(id >= 0 && id < vocab) << "id " << id;
        ASSERT_GT(p[static_cast<size_t>(id)], 0.0) << "id " << id << " is outside the top-k / nucleus";
        got[static_cast<size_t>(id / bucket_size)] += 1.0 / static_cast<double>(draws.size());
    }
    for (int64_t b = 0; b < buckets; ++b) {
        const double q = want[static_cast<size_t>(b)];
        const double sigma = std::sqrt(q * (1.0 - q) / static_cast<double>(draws.size()));
        EXPECT_NEAR(got[static_cast<size_t>(b)], q, 5.0 * sigma + 1e-3) << "bucket " << b;
    }
}

std::string describe(const RowSampling& s) {
    return "T " + std::to_string(s.temperature) + " k " + std::to_string(s.top_k) + " p " + std::to_string(s.top_p);
}

TEST(SamplingDistributionCudaTest, SmallVocabularyMatchesCpuSampler) {
    AFD_REQUIRE_SM90();
    // The largest at id 14, then 15, 0, then ties {1, 2}, 3, 4, {5, 6, 7}, 8, 9, {10, 11}, 12, 13.
    const std::vector<float> row = {2.0f, 1.5f,  1.5f,  1.0f,  0.8f,  0.5f,  0.5f, 0.5f,
                                    0.0f, -0.5f, -1.0f, -1.0f, -2.0f, -3.0f, 3.0f, 2.5f};
    const std::vector<RowSampling> configs = {
        {1.0f, 0, 1.0f, 11, 0},    {0.5f, 0, 1.0f, 12, 0},  {1.0f, 4, 1.0f, 13, 0},  // k 4 splits the tie {1, 2}
        {1.0f, 5, 1.0f, 14, 0},    {1.0f, 0, 0.8f, 15, 0},  {2.0f, 8, 0.7f, 16, 0},  // k 8 splits {5, 6, 7}
        {1.3f, 0, 0.5f, 17, 0},    {0.7f, 7, 0.95f, 18, 0}, {3.0f, 12, 1.0f, 19, 0},
        {1.0f, 15, 0.999f, 20, 0}, {1.0f, 16, 1.0f, 21, 0}, {0.05f, 0, 1.0f, 22, 0},
    };
    // The same with a 17th logit: rows that are not a multiple of 4 are read one float at a time.
    std::vector<float> odd = row;
    odd.push_back(2.75f);
    const std::vector<const std::vector<float>*> rows = {&row, &odd};
    for (const auto* r : rows) {
        const int64_t vocab = static_cast<int64_t>(r->size());
        for (const RowSampling& s : configs) {
            SCOPED_TRACE(describe(s) + " V " + std::to_string(vocab));
            expectDistribution(drawMany(*r, s), test::referenceDistribution(r->data(), vocab, s), 1);
        }
    }
}

TEST(SamplingDistributionCudaTest, CandidateBoundPathMatchesCpuSampler) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(41);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> row(3000);
    for (auto& v : row) {
        v = dist(rng);
    }
    for (const RowSampling& s : {RowSampling{1.0f, 20, 1.0f, 31, 0}, RowSampling{0.8f, 20, 0.6f, 32, 0},
                                 RowSampling{1.5f, 0, 0.3f, 33, 0}, RowSampling{1.0f, 300, 0.5f, 34, 0}}) {
        SCOPED_TRACE(describe(s));
        expectDistribution(drawMany(row, s), test::referenceDistribution(row.data(), 3000, s), 1);
    }
}

TEST(SamplingDistributionCudaTest, RadixSelectPathMatchesCpuSampler) {
    AFD_REQUIRE_SM90();
    const int64_t vocab = 8192;
    // 3000 tied logits at the top: top_k 2000 keeps the 2000 lowest ids of them (k above the candidate bound's reach).
    std::vector<float> ties(static_cast<size_t>(vocab), -1.0f);
    std::fill(ties.begin(), ties.begin() + 3000, 0.0f);
    // 4096 tied logits: the nucleus of top_p 0.5 is a prefix of more ties than the candidate buffer holds.
    std::vector<float> halves(static_cast<size_t>(vocab), -2.0f);
    std::fill(halves.begin() + 1000, halves.begin() + 5096, 0.0f);
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> spread(static_cast<size_t>(vocab));
    for (auto& v : spread) {
        v = dist(rng);
    }
    struct Case {
        const std::vector<float>* row;
        RowSampling s;
    };
    // top_p times the tied mass is kept off whole numbers: a nucleus boundary exactly between two ties would depend on
    // the CPU reference's double rounding.
    for (const Case& c : {Case{&ties, {1.0f, 2000, 1.0f, 51, 0}}, Case{&ties, {1.0f, 2500, 0.4502f, 52, 0}},
                          Case{&halves, {1.0f, 0, 0.5f, 53, 0}}, Case{&halves, {1.0f, 3000, 0.9005f, 54, 0}},
                          Case{&spread, {1.0f, 1500, 1.0f, 55, 0}}, Case{&spread, {0.7f, 0, 0.9f, 56, 0}},
                          Case{&spread, {1.0f, 4000, 0.8f, 57, 0}}}) {
        SCOPED_TRACE(describe(c.s));
        expectDistribution(drawMany(*c.row, c.s), test::referenceDistribution(c.row->data(), vocab, c.s), 256);
    }
}

TEST(SamplingDistributionCudaTest, TemperatureAloneOverALargeRowMatchesCpuSampler) {
    AFD_REQUIRE_SM90();
    const int64_t vocab = 20000;
    // Eight likely ids spread over the row (the draw walks many tiles), the rest 30 below.
    std::vector<float> row(static_cast<size_t>(vocab), -30.0f);
    const std::vector<int64_t> peaks = {19999, 15000, 12345, 8191, 4096, 4095, 777, 3};
    for (size_t i = 0; i < peaks.size(); ++i) {
        row[static_cast<size_t>(peaks[i])] = 1.0f - 0.25f * static_cast<float>(i);
    }
    for (const RowSampling& s : {RowSampling{1.0f, 0, 1.0f, 61, 0}, RowSampling{0.6f, 0, 1.0f, 62, 0}}) {
        SCOPED_TRACE(describe(s));
        expectDistribution(drawMany(row, s), test::referenceDistribution(row.data(), vocab, s), 1);
    }
}

}  // namespace
}  // namespace afd::kernels
