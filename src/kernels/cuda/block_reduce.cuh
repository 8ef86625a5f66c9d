// Block-wide sums and scans for the attention-side kernels (warp shuffles, then one value per warp in shared memory).
// Every thread of the block must call them (they synchronise); blockDim.x a multiple of 32, at most 1024.
// Included by .cu files only.
#pragma once

#include <cstdint>

namespace afd::kernels::cuda {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T warpSum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(kFullWarpMask, v, o);
    }
    return v;
}

// Inclusive prefix sum over the lanes of a warp.
template <typename T>
__device__ __forceinline__ T warpInclusiveScan(T v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T up = __shfl_up_sync(kFullWarpMask, v, o);
        if (lane >= o) {
            v += up;
        }
    }
    return v;
}

// The sum of v over the block, returned to every thread. scratch: 32 values of shared memory, free on entry (the
// leading barrier protects a previous call's readers).
template <typename T>
__device__ __forceinline__ T blockSum(T v, T* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int num_warps = blockDim.x >> 5;
    v = warpSum(v);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    T total = lane < num_warps ? scratch[lane] : T(0);
    return warpSum(total);
}

// The exclusive prefix sum of v over the threads of the block in thread order; *total gets the block's sum.
// scratch: 32 values of shared memory, as blockSum.
template <typename T>
__device__ __forceinline__ T blockExclusiveScan(T v, T* scratch, T* total) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int num_warps = blockDim.x >> 5;
    const T inclusive = warpInclusiveScan(v);
    __syncthreads();
    if (lane == 31) {
        scratch[warp] = inclusive;
    }
    __syncthreads();
    const T warp_total = lane < num_warps ? scratch[lane] : T(0);
    const T warp_prefix = warpInclusiveScan(warp_total);  // lane w: the sum over warps 0 .. w
    T warps_before = __shfl_up_sync(kFullWarpMask, warp_prefix, 1);
    T lanes_before = __shfl_up_sync(kFullWarpMask, inclusive, 1);
    if (lane == 0) {
        warps_before = T(0);
        lanes_before = T(0);
    }
    *total = __shfl_sync(kFullWarpMask, warp_prefix, 31);
    return __shfl_sync(kFullWarpMask, warps_before, warp) + lanes_before;
}

}  // namespace afd::kernels::cuda
