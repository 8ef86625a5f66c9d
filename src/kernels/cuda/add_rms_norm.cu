// Fused residual add + RMSNorm: one CTA per row, each thread 8 consecutive values (16-byte loads and stores) in up to
// kPer chunks held in registers between the sum of squares and the scaling, so the row is read once. Launched with
// programmatic dependent launch: the grid may start while the previous kernel finishes, waits for it before reading,
// and lets the next one (the router) start at once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/dense_stages.h"
#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

enum class Delta { kNone, kBf16, kF32 };

struct NormArgs {
    float* residual;
    const void* delta;
    const uint16_t* bias;
    const uint16_t* weight;
    const int32_t* rows;
    uint16_t* out;
    int64_t num_tokens;
    int chunks;  // H / 8
    float inv_hidden;
    float eps;
};

__device__ __forceinline__ void unpackBf16(const uint4& packed, float (&v)[8]) {
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        v[2 * q] = __uint_as_float(words[q] << 16);
        v[2 * q + 1] = __uint_as_float(words[q] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
    return static_cast<uint32_t>(core::floatToBf16Bits(lo)) | (static_cast<uint32_t>(core::floatToBf16Bits(hi)) << 16);
}

template <int kPer, Delta kDelta>
__global__ void __launch_bounds__(1024) addRmsNormKernel(NormArgs a) {
    __shared__ float scratch[32];
    sm90::gridDependencyWait();  // residual and delta are the previous kernels' outputs
    sm90::launchDependents();
    int64_t row = blockIdx.x;
    bool valid = true;
    if (a.rows != nullptr) {
        row = a.rows[blockIdx.x];
        valid = row >= 0 && row < a.num_tokens;
    }
    uint4* out = reinterpret_cast<uint4*>(a.out) + static_cast<int64_t>(blockIdx.x) * a.chunks;
    if (!valid) {  // uniform over the block
        for (int c = threadIdx.x; c < a.chunks; c += blockDim.x) {
            out[c] = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    float4* residual = reinterpret_cast<float4*>(a.residual) + row * a.chunks * 2;
    float v[kPer][8];
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < a.chunks) {
            const float4 lo = residual[2 * c];
            const float4 hi = residual[2 * c + 1];
            v[j][0] = lo.x, v[j][1] = lo.y, v[j][2] = lo.z, v[j][3] = lo.w;
            v[j][4] = hi.x, v[j][5] = hi.y, v[j][6] = hi.z, v[j][7] = hi.w;
            if constexpr (kDelta != Delta::kNone) {
                float d[8];
                if constexpr (kDelta == Delta::kBf16) {
                    unpackBf16(reinterpret_cast<const uint4*>(a.delta)[row * a.chunks + c], d);
                } else {
                    const float4* delta = reinterpret_cast<const float4*>(a.delta) + row * a.chunks * 2;
                    const float4 dlo = delta[2 * c];
                    const float4 dhi = delta[2 * c + 1];
                    d[0] = dlo.x, d[1] = dlo.y, d[2] = dlo.z, d[3] = dlo.w;
                    d[4] = dhi.x, d[5] = dhi.y, d[6] = dhi.z, d[7] = dhi.w;
                }
                if (a.bias != nullptr) {
                    float b[8];
                    unpackBf16(reinterpret_cast<const uint4*>(a.bias)[c], b);
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        d[e] += b[e];
                    }
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    v[j][e] += d[e];
                }
                residual[2 * c] = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
                residual[2 * c + 1] = make_float4(v[j][4], v[j][5], v[j][6], v[j][7]);
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                sum_sq += v[j][e] * v[j][e];
            }
        }
    }
    const float total = blockSum(sum_sq, scratch);
    const float inv = 1.0f / sqrtf(total * a.inv_hidden + a.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < a.chunks) {
            float w[8];
            unpackBf16(reinterpret_cast<const uint4*>(a.weight)[c], w);
            uint4 packed;
            packed.x = packBf16(w[0] * (v[j][0] * inv), w[1] * (v[j][1] * inv));
            packed.y = packBf16(w[2] * (v[j][2] * inv), w[3] * (v[j][3] * inv));
            packed.z = packBf16(w[4] * (v[j][4] * inv), w[5] * (v[j][5] * inv));
            packed.w = packBf16(w[6] * (v[j][6] * inv), w[7] * (v[j][7] * inv));
            out[c] = packed;
        }
    }
}

template <int kPer>
cudaError_t launchPer(const NormArgs& a, Delta delta, unsigned rows, unsigned threads, cudaStream_t stream) {
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t config = pdlLaunchConfig(rows, threads, stream, true, attr);
    switch (delta) {
        case Delta::kNone:
            return cudaLaunchKernelEx(&config, addRmsNormKernel<kPer, Delta::kNone>, a);
        case Delta::kBf16:
            return cudaLaunchKernelEx(&config, addRmsNormKernel<kPer, Delta::kBf16>, a);
        case Delta::kF32:
            return cudaLaunchKernelEx(&config, addRmsNormKernel<kPer, Delta::kF32>, a);
    }
    return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t enqueueAddRmsNorm(const AddRmsNormParams& p, cudaStream_t stream) {
    NormArgs a;
    a.residual = p.residual;
    a.delta = p.delta;
    a.bias = p.delta != nullptr && p.bias != nullptr ? reinterpret_cast<const uint16_t*>(p.bias) : nullptr;
    a.weight = reinterpret_cast<const uint16_t*>(p.weight);
    a.rows = p.rows;
    a.out = reinterpret_cast<uint16_t*>(p.out);
    a.num_tokens = p.num_tokens;
    a.chunks = static_cast<int>(p.hidden / 8);
    a.inv_hidden = 1.0f / static_cast<float>(p.hidden);
    a.eps = p.eps;
    const Delta delta = p.rows != nullptr || p.delta == nullptr ? Delta::kNone
                        : p.delta_dtype == ActDType::kBf16      ? Delta::kBf16
                                                                : Delta::kF32;
    const unsigned rows = static_cast<unsigned>(p.rows != nullptr ? p.num_rows : p.num_tokens);
    // As many threads as chunks up to 1024, then 2 or 4 chunks per thread (kMaxAddRmsNormHidden: 8 would spill).
    const int threads = std::min(1024, (a.chunks + 31) / 32 * 32);
    const int per = (a.chunks + threads - 1) / threads;
    if (per <= 1) {
        return launchPer<1>(a, delta, rows, static_cast<unsigned>(threads), stream);
    }
    if (per <= 2) {
        return launchPer<2>(a, delta, rows, static_cast<unsigned>(threads), stream);
    }
    return launchPer<4>(a, delta, rows, static_cast<unsigned>(threads), stream);
}

}  // namespace afd::kernels::cuda
