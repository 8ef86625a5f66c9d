#include "kernels_cuda/sampling_test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/sampling_cuda.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels::test {

ReferenceNucleus referenceNucleus(const float* logits, int64_t vocab, const RowSampling& s, double top_p_scale) {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    int64_t keep = vocab;
    if (s.top_k > 0 && s.top_k < vocab) {
        keep = s.top_k;
    }
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    order.resize(static_cast<size_t>(keep));
    std::vector<double> probs(order.size());
    const double max_logit = logits[order[0]];
    double sum = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
        probs[i] = std::exp((logits[order[i]] - max_logit) / s.temperature);
        sum += probs[i];
    }
    size_t cut = order.size();
    const double top_p = std::min(1.0, static_cast<double>(s.top_p) * top_p_scale);
    if (s.top_p < 1.0f && top_p < 1.0) {
        double cumulative = 0.0;
        for (size_t i = 0; i < order.size(); ++i) {
            cumulative += probs[i] / sum;
            if (cumulative >= top_p) {
                cut = i + 1;
                break;
            }
        }
    }
    ReferenceNucleus n;
    n.ids.assign(order.begin(), order.begin() + static_cast<int64_t>(cut));
    double total = 0.0;
    for (size_t i = 0; i < cut; ++i) {
        total += probs[i];
    }
    for (size_t i = 0; i < cut; ++i) {
        n.probs.push_back(probs[i] / total);
    }
    return n;
}

std::vector<double> referenceDistribution(const float* logits, int64_t vocab, const RowSampling& s) {
    const ReferenceNucleus n = referenceNucleus(logits, vocab, s);
    std::vector<double> p(static_cast<size_t>(vocab), 0.0);
    for (size_t i = 0; i < n.ids.size(); ++i) {
        p[static_cast<size_t>(n.ids[i])] = n.probs[i];
    }
    return p;
}

std::vector<int32_t> sampleOnDevice(const std::vector<float>& logits, int64_t vocab,
                                    const std::vector<RowSampling>& settings) {
    const int64_t rows = static_cast<int64_t>(settings.size());
    const int64_t given = static_cast<int64_t>(logits.size()) / vocab;
    AFD_CHECK(given == 1 || given == rows, "sampleOnDevice: {} rows of logits for {} settings", given, rows);
    // One given row is uploaded once and doubled on the device until every row holds it.
    const size_t row_bytes = static_cast<size_t>(vocab) * 4;
    DeviceBuffer d_logits(static_cast<size_t>(rows) * row_bytes);
    d_logits.upload(logits.data(), logits.size() * 4);
    for (int64_t have = given; have < rows; have *= 2) {
        const int64_t copy = std::min(have, rows - have);
        AFD_CUDA_CHECK(cudaMemcpy(d_logits.as<char>() + have * row_bytes, d_logits.get(), copy * row_bytes,
                                  cudaMemcpyDeviceToDevice));
    }
    std::vector<float> temperature, top_p;
    std::vector<int32_t> top_k;
    std::vector<uint64_t> seed, offset;
    for (const RowSampling& s : settings) {
        temperature.push_back(s.temperature);
        top_k.push_back(s.top_k);
        top_p.push_back(s.top_p);
        seed.push_back(s.seed);
        offset.push_back(s.offset);
    }
    DeviceBuffer d_temperature = DeviceBuffer::from(temperature);
    DeviceBuffer d_top_k = DeviceBuffer::from(top_k);
    DeviceBuffer d_top_p = DeviceBuffer::from(top_p);
    DeviceBuffer d_seed = DeviceBuffer::from(seed);
    DeviceBuffer d_offset = DeviceBuffer::from(offset);
    DeviceBuffer d_out(static_cast<size_t>(rows) * 4);
    d_out.poison();
    SampleTokensParams p;
    p.num_rows = rows;
    p.vocab_size = vocab;
    p.logits = d_logits.as<float>();
    p.temperature = d_temperature.as<float>();
    p.top_k = d_top_k.as<int32_t>();
    p.top_p = d_top_p.as<float>();
    p.seed = d_seed.as<uint64_t>();
    p.offset = d_offset.as<uint64_t>();
    p.out_ids = d_out.as<int32_t>();
    sampleTokensCuda(p, nullptr);
    AFD_CUDA_CHECK(cudaDeviceSynchronize());
    return d_out.download<int32_t>(static_cast<size_t>(rows));
}

}  // namespace afd::kernels::test
