// Small element-wise kernels: bf16 <-> fp32 conversion (8 values per thread, 16-byte accesses, grid-stride) and the
// masking of a padded batch's routing rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/dense_stages.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

unsigned blocksFor(int64_t work) {
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(kMaxBlocks, (work + kThreads - 1) / kThreads)));
}

__global__ void __launch_bounds__(kThreads)
    bf16ToF32Kernel(const uint16_t* __restrict__ in, float* __restrict__ out, int64_t count) {
    const int64_t chunks = count / 8;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    const int64_t first = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    for (int64_t c = first; c < chunks; c += stride) {
        const uint4 p = reinterpret_cast<const uint4*>(in)[c];
        float4* dst = reinterpret_cast<float4*>(out) + 2 * c;
        dst[0] = make_float4(__uint_as_float(p.x << 16), __uint_as_float(p.x & 0xffff0000u), __uint_as_float(p.y << 16),
                             __uint_as_float(p.y & 0xffff0000u));
        dst[1] = make_float4(__uint_as_float(p.z << 16), __uint_as_float(p.z & 0xffff0000u), __uint_as_float(p.w << 16),
                             __uint_as_float(p.w & 0xffff0000u));
    }
    const int64_t tail = chunks * 8 + first;
    if (tail < count && first < 8) {
        out[tail] = core::bf16BitsToFloat(in[tail]);
    }
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
    return static_cast<uint32_t>(core::floatToBf16Bits(lo)) | (static_cast<uint32_t>(core::floatToBf16Bits(hi)) << 16);
}

__global__ void __launch_bounds__(kThreads)
    f32ToBf16Kernel(const float* __restrict__ in, uint16_t* __restrict__ out, int64_t count) {
    const int64_t chunks = count / 8;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    const int64_t first = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    for (int64_t c = first; c < chunks; c += stride) {
        const float4* src = reinterpret_cast<const float4*>(in) + 2 * c;
        const float4 lo = src[0];
        const float4 hi = src[1];
        reinterpret_cast<uint4*>(out)[c] =
            make_uint4(packBf16(lo.x, lo.y), packBf16(lo.z, lo.w), packBf16(hi.x, hi.y), packBf16(hi.z, hi.w));
    }
    const int64_t tail = chunks * 8 + first;
    if (tail < count && first < 8) {
        out[tail] = core::floatToBf16Bits(in[tail]);
    }
}

__global__ void __launch_bounds__(kThreads)
    maskPaddedRowsKernel(const int32_t* __restrict__ num_valid, int32_t* __restrict__ ids, float* __restrict__ weights,
                         int64_t num_rows, int64_t top_k) {
    const int64_t valid = *num_valid;
    const int64_t entries = num_rows * top_k;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < entries; e += stride) {
        if (e / top_k >= valid) {
            ids[e] = -1;
            if (weights != nullptr) {
                weights[e] = 0.0f;
            }
        }
    }
}

}  // namespace

cudaError_t enqueueCast(const CastParams& p, cudaStream_t stream) {
    if (p.from == p.to) {
        const size_t bytes = static_cast<size_t>(p.count) * (p.from == ActDType::kF32 ? 4 : 2);
        return cudaMemcpyAsync(p.out, p.in, bytes, cudaMemcpyDeviceToDevice, stream);
    }
    const unsigned blocks = blocksFor(p.count / 8);
    if (p.from == ActDType::kBf16) {
        bf16ToF32Kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint16_t*>(p.in), static_cast<float*>(p.out),
                                                         p.count);
    } else {
        f32ToBf16Kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(p.in), static_cast<uint16_t*>(p.out),
                                                         p.count);
    }
    return cudaGetLastError();
}

cudaError_t enqueueMaskPaddedRows(const MaskPaddedRowsParams& p, cudaStream_t stream) {
    maskPaddedRowsKernel<<<blocksFor(p.num_rows * p.top_k), kThreads, 0, stream>>>(p.num_valid, p.topk_ids,
                                                                                   p.topk_weights, p.num_rows, p.top_k);
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
