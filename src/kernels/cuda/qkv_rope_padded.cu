// Post-processing of the fused QKV projection for padded heads (dense_cuda.h, QkvRopeParams::rope_dim < head_dim):
// one CTA per token, one thread per q, k or v head, scalar loads and stores. Every head it writes holds the model's
// head in lanes [0, rope_dim) and zeros in lanes [rope_dim, head_dim). Only small models store padded heads, so this
// kernel is plain rather than fast.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/dense_stages.h"
#include "kernels/cuda/qkv_rope_args.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kMaxThreads = 256;

__device__ __forceinline__ float bf16ToFloat(uint16_t bits) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

template <bool kF32In>
__device__ __forceinline__ float loadIn(const void* qkv, int64_t i) {
    if constexpr (kF32In) {
        return static_cast<const float*>(qkv)[i];
    } else {
        return bf16ToFloat(static_cast<const uint16_t*>(qkv)[i]);
    }
}

template <bool kF32In>
__global__ void __launch_bounds__(kMaxThreads) qkvRopePaddedKernel(QkvRopeArgs a) {
    const int64_t t = blockIdx.x;
    const int hd = a.head_dim;
    const int rd = a.rope_dim;
    const int half = rd / 2;
    const int heads = a.num_heads + 2 * a.num_kv_heads;
    const int32_t pos = a.positions[t];
    const bool pos_valid = pos >= 0 && pos < a.max_position;
    const int64_t slot = a.slot_mapping[t];
    const bool write_kv = pos_valid && slot >= 0 && slot < a.num_slots;
    for (int head = threadIdx.x; head < heads; head += blockDim.x) {
        const bool is_q = head < a.num_heads;
        const bool is_v = head >= a.num_heads + a.num_kv_heads;
        if (!is_q && !write_kv) {
            continue;
        }
        uint16_t* dst;
        if (is_q) {
            dst = a.q_out + (t * a.num_heads + head) * hd;
        } else if (!is_v) {
            dst = a.k_cache + (slot * a.num_kv_heads + (head - a.num_heads)) * hd;
        } else {
            dst = a.v_cache + (slot * a.num_kv_heads + (head - a.num_heads - a.num_kv_heads)) * hd;
        }
        const int64_t in = (t * heads + head) * static_cast<int64_t>(hd);  // the head's first lane in qkv
        auto value = [&](int i) {
            float v = loadIn<kF32In>(a.qkv, in + i);
            if (a.bias != nullptr) {
                v += bf16ToFloat(a.bias[head * hd + i]);
            }
            return v;
        };
        for (int i = rd; i < hd; ++i) {
            dst[i] = 0;
        }
        if (is_v) {
            for (int i = 0; i < rd; ++i) {
                dst[i] = core::floatToBf16Bits(value(i));
            }
            continue;
        }
        if (!pos_valid) {  // a q head (k is not written): zeros, as the vectorised kernel writes
            for (int i = 0; i < rd; ++i) {
                dst[i] = 0;
            }
            continue;
        }
        const uint16_t* norm = is_q ? a.q_norm : a.k_norm;
        float inv = 1.0f;
        if (norm != nullptr) {
            float sum_sq = 0.0f;
            for (int i = 0; i < rd; ++i) {
                const float v = value(i);
                sum_sq += v * v;
            }
            inv = 1.0f / sqrtf(sum_sq / static_cast<float>(rd) + a.eps);
        }
        const float* cos_row = a.rope_cos + static_cast<int64_t>(pos) * half;
        const float* sin_row = a.rope_sin + static_cast<int64_t>(pos) * half;
        for (int i = 0; i < half; ++i) {
            float x = value(i);
            float y = value(i + half);
            if (norm != nullptr) {
                x = bf16ToFloat(norm[i]) * (x * inv);
                y = bf16ToFloat(norm[i + half]) * (y * inv);
            }
            dst[i] = core::floatToBf16Bits(x * cos_row[i] - y * sin_row[i]);
            dst[i + half] = core::floatToBf16Bits(y * cos_row[i] + x * sin_row[i]);
        }
    }
}

}  // namespace

cudaError_t enqueueQkvRopePadded(const QkvRopeParams& p, cudaStream_t stream) {
    const QkvRopeArgs a = qkvRopeArgs(p);
    const int heads = a.num_heads + 2 * a.num_kv_heads;
    const int threads = std::min(kMaxThreads, (heads + 31) / 32 * 32);
    const auto grid = static_cast<unsigned>(p.num_tokens);
    if (p.qkv_dtype == ActDType::kF32) {
        qkvRopePaddedKernel<true><<<grid, static_cast<unsigned>(threads), 0, stream>>>(a);
    } else {
        qkvRopePaddedKernel<false><<<grid, static_cast<unsigned>(threads), 0, stream>>>(a);
    }
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
