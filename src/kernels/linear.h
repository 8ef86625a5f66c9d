// y = x · W^T (+ bias): the projections of the dense model (attention q/k/v/o, router gate, LM head).
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace afd::kernels {

struct LinearParams {
    int64_t rows = 0;                  // M
    int64_t in_features = 0;           // K
    int64_t out_features = 0;          // N
    const float* x = nullptr;          // [M, K]
    const core::Bf16* w = nullptr;     // [N, K]
    const core::Bf16* bias = nullptr;  // [N] or null
    float* y = nullptr;                // [M, N], must not alias x
};

// FP32 accumulation in a fixed order per output element, so a row's result does not depend on which other
// rows are in the batch (batched and single-sequence runs agree bit for bit). Uses the process thread pool.
void linearCpu(const LinearParams& params);

// Dot product of an fp32 vector with a bf16 vector in the fixed order linearCpu uses.
float dotF32Bf16(const float* x, const core::Bf16* w, int64_t n);

}  // namespace afd::kernels
