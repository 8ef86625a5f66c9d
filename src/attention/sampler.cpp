#include "attention/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/sampling.h"

namespace afd::attention {

core::Status SamplingParams::validate() const {
    if (max_tokens < 1) return core::invalidArgument("max_tokens must be >= 1, got {}", max_tokens);
    if (!(temperature >= 0.0f)) return core::invalidArgument("temperature must be >= 0, got {}", temperature);
    if (top_k < 0) return core::invalidArgument("top_k must be >= 0 (0 disables it), got {}", top_k);
    if (!(top_p > 0.0f && top_p <= 1.0f)) return core::invalidArgument("top_p must be in (0, 1], got {}", top_p);
    return core::Status::ok();
}

int32_t sampleToken(const float* logits, int64_t vocab_size, const SamplingParams& params, std::mt19937_64& rng) {
    if (params.temperature == 0.0f) return kernels::argmaxCpu(logits, vocab_size);
    std::vector<int32_t> order(static_cast<size_t>(vocab_size));
    std::iota(order.begin(), order.end(), 0);
    int64_t keep = vocab_size;
    if (params.top_k > 0 && params.top_k < vocab_size) keep = params.top_k;
    // Candidates in descending logit order (ties: lower id first).
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    order.resize(static_cast<size_t>(keep));
    std::vector<double> probs(order.size());
    const double max_logit = logits[order[0]];
    double sum = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
        probs[i] = std::exp((logits[order[i]] - max_logit) / params.temperature);
        sum += probs[i];
    }
    // Nucleus: the smallest prefix whose probability reaches top_p.
    size_t cut = order.size();
    if (params.top_p < 1.0f) {
        double cumulative = 0.0;
        for (size_t i = 0; i < order.size(); ++i) {
            cumulative += probs[i] / sum;
            if (cumulative >= params.top_p) {
                cut = i + 1;
                break;
            }
        }
    }
    double total = 0.0;
    for (size_t i = 0; i < cut; ++i) total += probs[i];
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    double acc = 0.0;
    for (size_t i = 0; i < cut; ++i) {
        acc += probs[i];
        if (u < acc) return order[i];
    }
    return order[cut - 1];
}

}  // namespace afd::attention
