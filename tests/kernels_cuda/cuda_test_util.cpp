#include "kernels_cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace afd::kernels::test {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
        AFD_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_ != nullptr) {
        (void)cudaFree(ptr_);
    }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_ != nullptr) {
            (void)cudaFree(ptr_);
        }
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
    AFD_CHECK(bytes <= bytes_, "upload of {} bytes into a buffer of {}", bytes, bytes_);
    if (bytes > 0) {
        AFD_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
    }
}

void DeviceBuffer::downloadTo(void* dst, size_t bytes) const {
    AFD_CHECK(bytes <= bytes_, "download of {} bytes from a buffer of {}", bytes, bytes_);
    if (bytes > 0) {
        AFD_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
    }
}

void DeviceBuffer::poison() {
    if (bytes_ > 0) {
        AFD_CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_));
    }
}

std::vector<core::Bf16> randomBf16(size_t count, float scale, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<core::Bf16> v(count);
    for (auto& e : v) {
        e = core::Bf16(dist(rng));
    }
    return v;
}

double relativeL2(const std::vector<float>& got, const std::vector<float>& want) {
    AFD_CHECK(got.size() == want.size(), "relativeL2: sizes {} and {}", got.size(), want.size());
    double diff = 0.0;
    double norm = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            return INFINITY;
        }
        const double d = static_cast<double>(got[i]) - want[i];
        diff += d * d;
        norm += static_cast<double>(want[i]) * want[i];
    }
    if (norm == 0.0) {
        return diff == 0.0 ? 0.0 : INFINITY;
    }
    return std::sqrt(diff / norm);
}

std::vector<float> toFloat(const std::vector<core::Bf16>& v) {
    std::vector<float> f(v.size());
    std::transform(v.begin(), v.end(), f.begin(), [](core::Bf16 b) { return b.toFloat(); });
    return f;
}

RoutingTable makeRouting(int64_t tokens, int64_t experts, int64_t top_k, Routing kind, std::mt19937& rng) {
    RoutingTable r;
    r.ids.assign(static_cast<size_t>(tokens * top_k), -1);
    r.weights.assign(static_cast<size_t>(tokens * top_k), 0.0f);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    std::vector<double> zipf(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
        zipf[static_cast<size_t>(e)] = 1.0 / static_cast<double>(e + 1);
    }
    std::uniform_int_distribution<int32_t> any_expert(0, static_cast<int32_t>(experts - 1));
    const int32_t lone = any_expert(rng);
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int32_t> chosen;
        if (kind == Routing::kOneExpert) {
            chosen.push_back(lone);
        } else {
            std::vector<double> w = zipf;
            while (static_cast<int64_t>(chosen.size()) < top_k) {
                int32_t e;
                if (kind == Routing::kSkewed) {
                    std::discrete_distribution<int32_t> pick(w.begin(), w.end());
                    e = pick(rng);
                    w[static_cast<size_t>(e)] = 0.0;
                } else {
                    e = any_expert(rng);
                    if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) {
                        continue;
                    }
                }
                chosen.push_back(e);
            }
        }
        for (size_t j = 0; j < chosen.size(); ++j) {
            const size_t i = static_cast<size_t>(t * top_k) + j;
            r.ids[i] = chosen[j];
            r.weights[i] = weight(rng);
        }
    }
    if (kind == Routing::kNoneServed) {
        std::fill(r.ids.begin(), r.ids.end(), -1);
    }
    if (kind == Routing::kWithUnserved) {
        std::bernoulli_distribution drop(0.25);
        for (auto& id : r.ids) {
            if (drop(rng)) {
                id = -1;
            }
        }
    }
    return r;
}

namespace {

float dot(const core::Bf16* a, const core::Bf16* b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        s += a[i].toFloat() * b[i].toFloat();
    }
    return s;
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

std::vector<std::vector<float>> referenceGateUp(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& w13,
                                                const std::vector<int32_t>& ids, int64_t tokens, int64_t hidden,
                                                int64_t inter, int64_t top_k) {
    std::vector<std::vector<float>> h(static_cast<size_t>(tokens * top_k));
    for (int64_t t = 0; t < tokens; ++t) {
        const core::Bf16* xt = x.data() + t * hidden;
        for (int64_t j = 0; j < top_k; ++j) {
            const int32_t e = ids[static_cast<size_t>(t * top_k + j)];
            if (e < 0) {
                continue;
            }
            auto& row = h[static_cast<size_t>(t * top_k + j)];
            row.resize(static_cast<size_t>(inter));
            const core::Bf16* we = w13.data() + e * 2 * inter * hidden;
            for (int64_t i = 0; i < inter; ++i) {
                const float g = dot(we + i * hidden, xt, hidden);
                const float u = dot(we + (inter + i) * hidden, xt, hidden);
                row[static_cast<size_t>(i)] = silu(g) * u;
            }
        }
    }
    return h;
}

std::vector<float> referenceDownRow(const std::vector<core::Bf16>& w2, int64_t expert, const float* h, int64_t hidden,
                                    int64_t inter) {
    std::vector<float> y(static_cast<size_t>(hidden));
    const core::Bf16* we = w2.data() + expert * hidden * inter;
    for (int64_t r = 0; r < hidden; ++r) {
        float s = 0.0f;
        for (int64_t i = 0; i < inter; ++i) {
            s += we[r * inter + i].toFloat() * h[i];
        }
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

std::vector<float> referenceMoe(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& w13,
                                const std::vector<core::Bf16>& w2, const RoutingTable& routing, int64_t tokens,
                                int64_t hidden, int64_t inter, int64_t top_k) {
    const auto h = referenceGateUp(x, w13, routing.ids, tokens, hidden, inter, top_k);
    std::vector<float> out(static_cast<size_t>(tokens * hidden), 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t j = 0; j < top_k; ++j) {
            const size_t i = static_cast<size_t>(t * top_k + j);
            if (routing.ids[i] < 0) {
                continue;
            }
            const auto y = referenceDownRow(w2, routing.ids[i], h[i].data(), hidden, inter);
            for (int64_t r = 0; r < hidden; ++r) {
                out[static_cast<size_t>(t * hidden + r)] += routing.weights[i] * y[static_cast<size_t>(r)];
            }
        }
    }
    return out;
}

RouterReference referenceRouter(const std::vector<core::Bf16>& x, const std::vector<core::Bf16>& gate_w, int64_t tokens,
                                int64_t hidden, int64_t experts, int64_t top_k, bool renormalize) {
    RouterReference r;
    r.logits.resize(static_cast<size_t>(tokens * experts));
    r.probs.resize(r.logits.size());
    r.ids.resize(static_cast<size_t>(tokens * top_k));
    r.weights.resize(r.ids.size());
    for (int64_t t = 0; t < tokens; ++t) {
        float* l = r.logits.data() + t * experts;
        float* p = r.probs.data() + t * experts;
        float max_logit = -INFINITY;
        for (int64_t e = 0; e < experts; ++e) {
            l[e] = dot(x.data() + t * hidden, gate_w.data() + e * hidden, hidden);
            max_logit = std::max(max_logit, l[e]);
        }
        float sum = 0.0f;
        for (int64_t e = 0; e < experts; ++e) {
            p[e] = std::exp(l[e] - max_logit);
            sum += p[e];
        }
        for (int64_t e = 0; e < experts; ++e) {
            p[e] /= sum;
        }
        std::vector<int32_t> order(static_cast<size_t>(experts));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
        float selected = 0.0f;
        for (int64_t k = 0; k < top_k; ++k) {
            selected += p[order[static_cast<size_t>(k)]];
        }
        for (int64_t k = 0; k < top_k; ++k) {
            const int32_t e = order[static_cast<size_t>(k)];
            r.ids[static_cast<size_t>(t * top_k + k)] = e;
            r.weights[static_cast<size_t>(t * top_k + k)] = renormalize ? p[e] / selected : p[e];
        }
    }
    return r;
}

}  // namespace afd::kernels::test
