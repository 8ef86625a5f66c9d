// One 8-column chunk of the combine, shared by the combine kernel (moe_combine.cu) and the down kernel's combining
// warps (moe_grouped_gemm.cuh, GroupedGemmArgs::PartCombine), so that every column of out is summed the same way
// whichever of them sums it: in entry order, in fp32 with fused multiply-adds, rounded to bf16 once.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace afd::kernels::cuda {

__device__ __forceinline__ void accumulateBf16x8(float (&acc)[8], const uint4& packed, float w) {
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        acc[2 * q] = fmaf(w, __uint_as_float(words[q] << 16), acc[2 * q]);
        acc[2 * q + 1] = fmaf(w, __uint_as_float(words[q] & 0xffff0000u), acc[2 * q + 1]);
    }
}

__device__ __forceinline__ uint32_t packBf16x2Rn(float lo, float hi) {
    const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}

// sum over j < top_k with slots[j] >= 0 of weights[j] * y[slots[j], col .. col + 8) (bf16 rows of `ld` values), as
// 8 bf16. kBatch entries' rows are loaded before any is summed, so each thread has that many 16-byte reads in flight.
// y is read with plain loads: the down kernel's combining warps read rows other CTAs wrote during the same grid.
template <int kBatch>
__device__ __forceinline__ uint4 combineChunk(const int32_t* slots, const float* weights, int top_k, const uint16_t* y,
                                              int64_t ld, int col) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j0 = 0; j0 < top_k; j0 += kBatch) {
        int slot[kBatch];
        uint4 packed[kBatch];
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            slot[q] = j0 + q < top_k ? __ldg(slots + j0 + q) : -1;
        }
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            if (slot[q] >= 0) {
                packed[q] = *reinterpret_cast<const uint4*>(y + static_cast<int64_t>(slot[q]) * ld + col);
            }
        }
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            if (slot[q] >= 0) {
                accumulateBf16x8(acc, packed[q], __ldg(weights + j0 + q));
            }
        }
    }
    uint4 result;
    result.x = packBf16x2Rn(acc[0], acc[1]);
    result.y = packBf16x2Rn(acc[2], acc[3]);
    result.z = packBf16x2Rn(acc[4], acc[5]);
    result.w = packBf16x2Rn(acc[6], acc[7]);
    return result;
}

}  // namespace afd::kernels::cuda
