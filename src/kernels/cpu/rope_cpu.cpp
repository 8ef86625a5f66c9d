#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/rope.h"

namespace afd::kernels {

void ropeTableCpu(const int32_t* positions, int64_t num_tokens, int64_t head_dim, double theta, float* cos_out,
                  float* sin_out) {
    AFD_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope head_dim {} must be even", head_dim);
    const int64_t half = head_dim / 2;
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
        inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float pos = static_cast<float>(positions[t]);
        for (int64_t i = 0; i < half; ++i) {
            const float angle = pos * inv_freq[static_cast<size_t>(i)];
            cos_out[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
            sin_out[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
        }
    }
}

void applyRopeCpu(const RopeParams& p) {
    const int64_t half = p.head_dim / 2;
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const float* c = p.cos + t * half;
        const float* s = p.sin + t * half;
        for (int64_t h = 0; h < p.num_heads; ++h) {
            float* v = p.x + (t * p.num_heads + h) * p.head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i];
                const float b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

}  // namespace afd::kernels
