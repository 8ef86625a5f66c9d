// The raw launcher behind kernels::fillWords32Cuda (fill.cu; no logging or fmt headers, which nvcc cannot take).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace afd::kernels {

cudaError_t launchFillWords32(void* dst, uint32_t value, int64_t count, cudaStream_t stream);

}  // namespace afd::kernels
