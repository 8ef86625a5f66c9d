// The fill kernel of kernels/fill_cuda.h: a grid-stride store of one 32-bit value (checked in fill_cuda.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/fill_launch.h"

namespace afd::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

__global__ void fillWords32Kernel(uint32_t* dst, uint32_t value, int64_t count) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
        dst[i] = value;
    }
}

}  // namespace

cudaError_t launchFillWords32(void* dst, uint32_t value, int64_t count, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    const int64_t blocks = std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks);
    fillWords32Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), value,
                                                                              count);
    return cudaGetLastError();
}

}  // namespace afd::kernels
