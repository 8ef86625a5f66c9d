// Embedding gather: out[t] = float(table[ids[t]]), fp32 [T, H]. One thread per 8 values (a 16-byte load of bf16, two
// 16-byte stores of fp32) over the flattened [T, H / 8], grid-stride.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/dense_stages.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

__global__ void __launch_bounds__(kThreads)
    embeddingKernel(const int32_t* __restrict__ ids, const uint4* __restrict__ table, float4* __restrict__ out,
                    int64_t num_chunks, int64_t row_chunks, int64_t vocab) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < num_chunks;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
        const int64_t t = c / row_chunks;
        const int64_t col = c - t * row_chunks;
        const int32_t id = __ldg(ids + t);
        float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float4 hi = lo;
        if (id >= 0 && id < vocab) {
            const uint4 packed = __ldg(table + static_cast<int64_t>(id) * row_chunks + col);
            lo = make_float4(__uint_as_float(packed.x << 16), __uint_as_float(packed.x & 0xffff0000u),
                             __uint_as_float(packed.y << 16), __uint_as_float(packed.y & 0xffff0000u));
            hi = make_float4(__uint_as_float(packed.z << 16), __uint_as_float(packed.z & 0xffff0000u),
                             __uint_as_float(packed.w << 16), __uint_as_float(packed.w & 0xffff0000u));
        }
        out[2 * c] = lo;
        out[2 * c + 1] = hi;
    }
}

}  // namespace

cudaError_t enqueueEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
    const int64_t row_chunks = p.hidden / 8;
    const int64_t num_chunks = p.num_tokens * row_chunks;
    const int64_t blocks = std::min(kMaxBlocks, (num_chunks + kThreads - 1) / kThreads);
    embeddingKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.ids, reinterpret_cast<const uint4*>(p.table), reinterpret_cast<float4*>(p.out), num_chunks, row_chunks,
        p.vocab_size);
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
