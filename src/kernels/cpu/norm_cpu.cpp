#include <cmath>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/norm.h"

namespace afd::kernels {

void rmsNormCpu(const RmsNormParams& p) {
    AFD_CHECK(p.rows >= 0 && p.dim > 0, "bad rmsnorm shape rows={} dim={}", p.rows, p.dim);
    core::parallelFor(p.rows, 64, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* x = p.x + r * p.dim;
            float* out = p.out + r * p.dim;
            double sum_sq = 0.0;
            for (int64_t i = 0; i < p.dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
            const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(p.dim));
            const float inv = 1.0f / std::sqrt(mean_sq + p.eps);
            for (int64_t i = 0; i < p.dim; ++i) out[i] = p.weight[i].toFloat() * (x[i] * inv);
        }
    });
}

}  // namespace afd::kernels
