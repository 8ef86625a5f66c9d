// Rotary position embedding as HF computes it for rope_type "default" (rotate-half layout):
//   inv_freq[i] = 1 / theta^(2i / head_dim)      (FP32)
//   angle       = position * inv_freq[i]          (FP32)
//   x'[i]       = x[i] cos - x[i + d/2] sin,  x'[i + d/2] = x[i + d/2] cos + x[i] sin,  i < d/2
#pragma once

#include <cstdint>

namespace afd::kernels {

// Fills cos/sin tables [num_tokens, head_dim / 2] for the given positions.
void ropeTableCpu(const int32_t* positions, int64_t num_tokens, int64_t head_dim, double theta, float* cos_out,
                  float* sin_out);

struct RopeParams {
    int64_t num_tokens = 0;
    int64_t num_heads = 0;
    int64_t head_dim = 0;        // even
    const float* cos = nullptr;  // [T, head_dim / 2]
    const float* sin = nullptr;  // [T, head_dim / 2]
    float* x = nullptr;          // [T, num_heads, head_dim], rotated in place
};

void applyRopeCpu(const RopeParams& params);

}  // namespace afd::kernels
