// Post-processing of the fused QKV projection: one CTA per token. A q or k head is split over head_dim / 16 adjacent
// threads, each holding 8 values of the head's first half and the 8 values they rotate with in its second half
// (16-byte loads); the head's sum of squares is reduced over those threads with shuffles. The v heads are copied
// 16 bytes per thread.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/dense_stages.h"
#include "kernels/cuda/qkv_rope_args.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kMaxThreads = 512;

__device__ __forceinline__ void load8(const uint16_t* src, float (&v)[8]) {
    const uint4 packed = *reinterpret_cast<const uint4*>(src);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        v[2 * q] = __uint_as_float(words[q] << 16);
        v[2 * q + 1] = __uint_as_float(words[q] & 0xffff0000u);
    }
}

__device__ __forceinline__ void add8(const uint16_t* src, float (&v)[8]) {
    float b[8];
    load8(src, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        v[e] += b[e];
    }
}

__device__ __forceinline__ void store8(uint16_t* dst, const float (&v)[8]) {
    uint32_t words[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        words[q] = static_cast<uint32_t>(core::floatToBf16Bits(v[2 * q])) |
                   (static_cast<uint32_t>(core::floatToBf16Bits(v[2 * q + 1])) << 16);
    }
    *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ __forceinline__ void loadF8(const float* src, float (&v)[8]) {
    const float4 lo = *reinterpret_cast<const float4*>(src);
    const float4 hi = *reinterpret_cast<const float4*>(src + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
    v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

// 8 consecutive values of a qkv row, from bf16 or fp32.
template <bool kF32In>
__device__ __forceinline__ void loadIn8(const void* row, int64_t offset, float (&v)[8]) {
    if constexpr (kF32In) {
        loadF8(static_cast<const float*>(row) + offset, v);
    } else {
        load8(static_cast<const uint16_t*>(row) + offset, v);
    }
}

template <bool kF32In>
__global__ void __launch_bounds__(kMaxThreads) qkvRopeKernel(QkvRopeArgs a) {
    const int64_t t = blockIdx.x;
    const int hd = a.head_dim;
    const int half = hd / 2;
    const int per_head = hd / 16;  // threads per q/k head: a power of two dividing 32
    const int qk_items = (a.num_heads + a.num_kv_heads) * per_head;
    const int64_t row_elems = static_cast<int64_t>(a.num_heads + 2 * a.num_kv_heads) * hd;
    using In = std::conditional_t<kF32In, float, uint16_t>;
    const In* src_row = static_cast<const In*>(a.qkv) + t * row_elems;
    const int32_t pos = a.positions[t];
    const bool pos_valid = pos >= 0 && pos < a.max_position;
    const int64_t slot = a.slot_mapping[t];
    const bool write_kv = pos_valid && slot >= 0 && slot < a.num_slots;
    uint16_t* q_row = a.q_out + t * a.num_heads * hd;

    // q and k heads. The loop bound is the same for every thread, so whole warps reach the shuffles.
    for (int base = 0; base < qk_items; base += blockDim.x) {
        const int item = base + threadIdx.x;
        const bool active = item < qk_items;
        const int head = active ? item / per_head : 0;
        const int i = (item - head * per_head) * 8;  // first of the 8 values in each half
        const bool is_q = head < a.num_heads;
        float lo[8] = {};
        float hi[8] = {};
        if (active) {
            loadIn8<kF32In>(src_row, head * hd + i, lo);
            loadIn8<kF32In>(src_row, head * hd + half + i, hi);
            if (a.bias != nullptr) {
                add8(a.bias + head * hd + i, lo);
                add8(a.bias + head * hd + half + i, hi);
            }
        }
        float sum_sq = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            sum_sq += lo[e] * lo[e] + hi[e] * hi[e];
        }
        for (int o = per_head / 2; o > 0; o >>= 1) {
            sum_sq += __shfl_xor_sync(kFullWarpMask, sum_sq, o);
        }
        if (!active) {
            continue;
        }
        const uint16_t* norm = is_q ? a.q_norm : a.k_norm;
        if (norm != nullptr) {
            const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(hd) + a.eps);
            float w_lo[8];
            float w_hi[8];
            load8(norm + i, w_lo);
            load8(norm + half + i, w_hi);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                lo[e] = w_lo[e] * (lo[e] * inv);
                hi[e] = w_hi[e] * (hi[e] * inv);
            }
        }
        if (pos_valid) {
            float c[8];
            float s[8];
            loadF8(a.rope_cos + static_cast<int64_t>(pos) * half + i, c);
            loadF8(a.rope_sin + static_cast<int64_t>(pos) * half + i, s);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float x = lo[e];
                const float y = hi[e];
                lo[e] = x * c[e] - y * s[e];
                hi[e] = y * c[e] + x * s[e];
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                lo[e] = 0.0f;
                hi[e] = 0.0f;
            }
        }
        if (is_q) {
            store8(q_row + head * hd + i, lo);
            store8(q_row + head * hd + half + i, hi);
        } else if (write_kv) {
            uint16_t* dst = a.k_cache + (slot * a.num_kv_heads + (head - a.num_heads)) * hd;
            store8(dst + i, lo);
            store8(dst + half + i, hi);
        }
    }

    if (!write_kv) {
        return;
    }
    // v heads: 8 values per thread.
    const int v_items = a.num_kv_heads * hd / 8;
    const int64_t v_begin = static_cast<int64_t>(a.num_heads + a.num_kv_heads) * hd;
    uint16_t* v_dst = a.v_cache + slot * a.num_kv_heads * hd;
    for (int item = threadIdx.x; item < v_items; item += blockDim.x) {
        float v[8];
        loadIn8<kF32In>(src_row, v_begin + item * 8, v);
        if (a.bias != nullptr) {
            add8(a.bias + v_begin + item * 8, v);
        }
        store8(v_dst + item * 8, v);
    }
}

}  // namespace

cudaError_t enqueueQkvRope(const QkvRopeParams& p, cudaStream_t stream) {
    const QkvRopeArgs a = qkvRopeArgs(p);
    const int qk_items = (a.num_heads + a.num_kv_heads) * (a.head_dim / 16);
    const int threads = std::min(kMaxThreads, (qk_items + 31) / 32 * 32);
    if (p.qkv_dtype == ActDType::kF32) {
        qkvRopeKernel<true><<<static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(threads), 0, stream>>>(a);
    } else {
        qkvRopeKernel<false><<<static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(threads), 0, stream>>>(a);
    }
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
