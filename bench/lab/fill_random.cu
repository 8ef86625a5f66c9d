// Device-side random fill for benchmarks and tests: uniform bf16 values from a counter-based hash of
// (seed, index), so large weight sets are generated at memory speed and reproducibly.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "lab/fill_random.h"

namespace afd::lab {
namespace {

__global__ void fillRandomKernel(uint16_t* data, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        // splitmix64 of (seed, i)
        uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        data[i] = __bfloat16_as_ushort(__float2bfloat16_rn((2.0f * u - 1.0f) * scale));
    }
}

}  // namespace

cudaError_t launchFillRandomBf16(uint16_t* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
    if (n <= 0) {
        return cudaSuccess;
    }
    const int64_t blocks = (n + 255) / 256;
    fillRandomKernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(data, n, seed, scale);
    return cudaGetLastError();
}

}  // namespace afd::lab
