#include "attention_bench_fill.h"

namespace afd::bench {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

__global__ void fillKernel(uint16_t* dst, size_t count, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float unit = static_cast<float>(mix(seed ^ (i * 0x9E3779B97F4A7C15ull)) >> 40) * (1.0f / 16777216.0f);
        const float v = (2.0f * unit - 1.0f) * scale;
        dst[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);  // truncation: any bf16 in range will do
    }
}

}  // namespace

cudaError_t fillUniformBf16(uint16_t* dst, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
    if (count == 0) {
        return cudaSuccess;
    }
    fillKernel<<<1024, 256, 0, stream>>>(dst, count, seed, scale);
    return cudaGetLastError();
}

}  // namespace afd::bench
