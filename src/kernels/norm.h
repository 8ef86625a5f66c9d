// RMSNorm as HF Qwen3 computes it in FP32: out = weight * (x * rsqrt(mean(x^2) + eps)).
// Also used per attention head (q_norm / k_norm) by viewing [T, heads, head_dim] as rows of head_dim.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace afd::kernels {

struct RmsNormParams {
    int64_t rows = 0;
    int64_t dim = 0;
    float eps = 1e-6f;
    const float* x = nullptr;            // [rows, dim]
    const core::Bf16* weight = nullptr;  // [dim]
    float* out = nullptr;                // [rows, dim]; may equal x (in place)
};

void rmsNormCpu(const RmsNormParams& params);

}  // namespace afd::kernels
