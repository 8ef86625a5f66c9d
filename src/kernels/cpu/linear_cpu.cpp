#include <algorithm>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"

namespace afd::kernels {

float dotF32Bf16(const float* x, const core::Bf16* w, int64_t n) {
    // Eight independent partial sums let the compiler vectorise without reassociating a single sum.
    constexpr int kLanes = 8;
    float acc[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) {
        for (int j = 0; j < kLanes; ++j) acc[j] += x[k + j] * core::bf16BitsToFloat(w[k + j].bits);
    }
    float tail = 0.0f;
    for (; k < n; ++k) tail += x[k] * core::bf16BitsToFloat(w[k].bits);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void linearCpu(const LinearParams& p) {
    AFD_CHECK(p.rows >= 0 && p.in_features > 0 && p.out_features > 0, "bad linear shape M={} K={} N={}", p.rows,
              p.in_features, p.out_features);
    if (p.rows == 0) return;
    AFD_CHECK(p.x != nullptr && p.w != nullptr && p.y != nullptr, "linear: null pointer");
    // Work items are blocks of output features; each block's weight rows stay in cache across all input rows.
    constexpr int64_t kBlock = 16;
    const int64_t num_blocks = (p.out_features + kBlock - 1) / kBlock;
    core::parallelFor(num_blocks, 1, [&](int64_t block_begin, int64_t block_end) {
        for (int64_t b = block_begin; b < block_end; ++b) {
            const int64_t n0 = b * kBlock;
            const int64_t n1 = std::min(p.out_features, n0 + kBlock);
            for (int64_t m = 0; m < p.rows; ++m) {
                const float* x_row = p.x + m * p.in_features;
                float* y_row = p.y + m * p.out_features;
                for (int64_t n = n0; n < n1; ++n) {
                    float v = dotF32Bf16(x_row, p.w + n * p.in_features, p.in_features);
                    if (p.bias != nullptr) v += p.bias[n].toFloat();
                    y_row[n] = v;
                }
            }
        }
    });
}

}  // namespace afd::kernels
