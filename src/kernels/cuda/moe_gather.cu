// Token gather of the MoE layer for wide128, whose gate-up kernel loads token tiles by TMA and runs beside this
// kernel: x_sorted[slot] = x[token of slot] for the served slots, in slot order, so that each expert's tokens are
// contiguous rows and each expert's rows complete as early as they can; the gate-up kernel takes each expert's rows as
// soon as they are counted (launchMoeGather).
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

// CTA c copies slots [8 g, 8 g + 8) for g = c, c + gridDim.x, ..., a warp a slot,
// then thread 0 adds the group's rows to the counts of their experts with release (the CTA barrier orders the
// warps' stores before it).
__global__ void __launch_bounds__(kThreads)
    gatherBySlotKernel(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset, int num_experts,
                       int hidden, uint16_t* x_sorted, int32_t* gathered) {
    __shared__ int offsets[kMoeMaxExperts + 1];
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

cudaError_t launchMoeGather(const MoeGatherParams& p, cudaStream_t stream) {
    if (p.hidden % 8 != 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.gathered == nullptr) {
        return cudaErrorInvalidValue;
    }
    static std::atomic<uint64_t> configured_devices{0};
    const cudaError_t err = maxSharedCarveoutOnce(gatherBySlotKernel, configured_devices);
    if (err != cudaSuccess) {
        return err;
    }
    cudaLaunchAttribute attr[1];
    // One CTA per SM, beside the gate-up kernel's.
    const cudaLaunchConfig_t config = pdlLaunchConfig(static_cast<unsigned>(p.sm_count), kThreads, stream, true, attr);
    return cudaLaunchKernelEx(&config, gatherBySlotKernel, p.x, p.slot_token, p.slot_offset, p.num_experts, p.hidden,
                              p.x_sorted, p.gathered);
}

}  // namespace afd::kernels::cuda
