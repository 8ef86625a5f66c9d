// Token selection from logits.
#pragma once

#include <cstdint>

namespace afd::kernels {

// Index of the largest value; the first one on ties (as torch.argmax). NaN never wins.
int32_t argmaxCpu(const float* logits, int64_t n);

}  // namespace afd::kernels
