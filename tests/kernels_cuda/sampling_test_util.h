// Helpers of the device sampling tests: the CPU sampler's candidate list written out (the order, top-k, softmax with
// temperature and nucleus of attention/sampler.cpp, in double), and one call of sampleTokensCuda on host vectors.
#pragma once

#include <cstdint>
#include <vector>

namespace afd::kernels::test {

// Per-row sampling settings as the device arrays take them.
struct RowSampling {
    float temperature = 1.0f;
    int32_t top_k = 0;
    float top_p = 1.0f;
    uint64_t seed = 0;
    uint64_t offset = 0;
};

// The CPU sampler's nucleus of one row: ids in its order (larger logit first, ties to the lower id) and their
// probabilities normalised over the nucleus. top_p_scale scales top_p (capped at 1) for the looser or tighter nuclei
// that bound the device's float rounding.
struct ReferenceNucleus {
    std::vector<int32_t> ids;
    std::vector<double> probs;
};
ReferenceNucleus referenceNucleus(const float* logits, int64_t vocab, const RowSampling& s, double top_p_scale = 1.0);

// Probability of every id under the CPU sampler (zero outside the nucleus).
std::vector<double> referenceDistribution(const float* logits, int64_t vocab, const RowSampling& s);

// Runs sampleTokensCuda over `rows` rows of `logits` (host, [rows, vocab]) with per-row settings; returns the ids.
// logits may also hold one row, repeated for every row of `settings`.
std::vector<int32_t> sampleOnDevice(const std::vector<float>& logits, int64_t vocab,
                                    const std::vector<RowSampling>& settings);

}  // namespace afd::kernels::test
