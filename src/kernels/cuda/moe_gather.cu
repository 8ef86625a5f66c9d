// Token gather of the MoE layer for the tile shapes that load token tiles by TMA: x_sorted[slot] = x[token of
// slot] for the served slots, so that each expert's tokens are contiguous rows. Token-major: one warp per token
// reads its row of x once into registers and writes it to each of the token's slots, so x crosses DRAM once
// (read in slot order, each row of x would be fetched top_k times once x outgrows L2). The slot-order variant runs
// beside a gate-up kernel that takes each expert's rows as soon as they are complete (launchMoeGatherBySlot).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_slot_gather.cuh"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecPerLane = 8;  // 16-byte vectors of a row each lane holds at once (2048 bf16 = one pass)

// The lane's vectors of one pass (vectors v0 + 32 q + lane, q < kVecPerLane, of a row of row_vectors) to or from
// registers.
__device__ __forceinline__ void loadRowPass(const uint4* src, int v0, int lane, int row_vectors,
                                            uint4 (&row)[kVecPerLane]) {
#pragma unroll
    for (int q = 0; q < kVecPerLane; ++q) {
        const int v = v0 + q * 32 + lane;
        if (v < row_vectors) {
            row[q] = __ldg(src + v);
        }
    }
}
__device__ __forceinline__ void storeRowPass(uint4* dst, int v0, int lane, int row_vectors,
                                             const uint4 (&row)[kVecPerLane]) {
#pragma unroll
    for (int q = 0; q < kVecPerLane; ++q) {
        const int v = v0 + q * 32 + lane;
        if (v < row_vectors) {
            dst[v] = row[q];
        }
    }
}

__global__ void __launch_bounds__(kThreads) gatherKernel(const uint16_t* x, const int32_t* entry_slot, int num_tokens,
                                                         int top_k, int hidden, uint16_t* x_sorted) {
    sm90::gridDependencyWait();
    sm90::launchDependents();
    const int lane = threadIdx.x & 31;
    const int row_vectors = hidden / 8;
    for (int t = blockIdx.x * kWarps + (threadIdx.x >> 5); t < num_tokens; t += gridDim.x * kWarps) {
        const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * hidden);
        for (int v0 = 0; v0 < row_vectors; v0 += 32 * kVecPerLane) {
            uint4 row[kVecPerLane];
            loadRowPass(src, v0, lane, row_vectors, row);
            for (int j = 0; j < top_k; ++j) {
                const int slot = entry_slot[static_cast<int64_t>(t) * top_k + j];  // the same for the whole warp
                if (slot < 0) {
                    continue;
                }
                storeRowPass(reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(slot) * hidden), v0, lane,
                             row_vectors, row);
            }
        }
    }
}

// Slot order (launchMoeGatherBySlot): CTA c copies slots [8 g, 8 g + 8) for g = c, c + gridDim.x, ..., a warp a slot,
// then thread 0 adds the group's rows to the counts of their experts with release (the CTA barrier orders the
// warps' stores before it).
__global__ void __launch_bounds__(kThreads)
    gatherBySlotKernel(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset, int num_experts,
                       int hidden, uint16_t* x_sorted, int32_t* gathered) {
    __shared__ int offsets[kMaxPermuteExperts + 1];
    sm90::gridDependencyWait();
    sm90::launchDependents();
    for (int i = threadIdx.x; i <= num_experts; i += kThreads) {
        offsets[i] = slot_offset[i];
    }
    __syncthreads();
    const int total = offsets[num_experts];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int row_vectors = hidden / 8;
    for (int group = blockIdx.x * kWarps; group < total; group += gridDim.x * kWarps) {
        const int s = group + warp;
        if (s < total) {
            copyRowByWarp<kVecPerLane>(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(slot_token[s]) * hidden),
                                       reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(s) * hidden), lane,
                                       row_vectors);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            countGatheredSlots(offsets, num_experts, group, min(group + kWarps, total), gathered);
        }
    }
}

}  // namespace

cudaError_t launchMoeGather(const uint16_t* x, const int32_t* entry_slot, int num_tokens, int top_k, int hidden,
                            uint16_t* x_sorted, int sm_count, cudaStream_t stream, bool programmatic) {
    if (hidden % 8 != 0 || num_tokens < 1 || top_k < 1) {
        return cudaErrorInvalidValue;
    }
    // The GEMM kernels' carveout: the wide128 gate-up CTAs start beside this kernel's (kStreamsBesideGather).
    static std::atomic<uint64_t> configured_devices{0};
    const cudaError_t err = maxSharedCarveoutOnce(gatherKernel, configured_devices);
    if (err != cudaSuccess) {
        return err;
    }
    const int wanted = (num_tokens + kWarps - 1) / kWarps;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t config = pdlLaunchConfig(
        static_cast<unsigned>(wanted < 8 * sm_count ? wanted : 8 * sm_count), kThreads, stream, programmatic, attr);
    return cudaLaunchKernelEx(&config, gatherKernel, x, entry_slot, num_tokens, top_k, hidden, x_sorted);
}

cudaError_t launchMoeGatherBySlot(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset,
                                  int num_experts, int hidden, uint16_t* x_sorted, int32_t* gathered, int sm_count,
                                  cudaStream_t stream, bool programmatic) {
    if (hidden % 8 != 0 || num_experts < 1 || num_experts > kMaxPermuteExperts || gathered == nullptr) {
        return cudaErrorInvalidValue;
    }
    static std::atomic<uint64_t> configured_devices{0};
    const cudaError_t err = maxSharedCarveoutOnce(gatherBySlotKernel, configured_devices);
    if (err != cudaSuccess) {
        return err;
    }
    cudaLaunchAttribute attr[1];
    // One CTA per SM, beside the gate-up kernel's.
    const cudaLaunchConfig_t config =
        pdlLaunchConfig(static_cast<unsigned>(sm_count), kThreads, stream, programmatic, attr);
    return cudaLaunchKernelEx(&config, gatherBySlotKernel, x, slot_token, slot_offset, num_experts, hidden, x_sorted,
                              gathered);
}

}  // namespace afd::kernels::cuda
