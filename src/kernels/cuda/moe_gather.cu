// Token gather of the MoE layer for the tile shapes that load token tiles by TMA: x_sorted[slot] = x[token of
// slot] for the served slots, so that each expert's tokens are contiguous rows. One warp per slot, 16 bytes
// per lane per step.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
    gatherKernel(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset, int num_experts, int hidden,
                 int max_slots, uint16_t* x_sorted) {
    sm90::gridDependencyWait();
    sm90::launchDependents();
    const int slots = min(slot_offset[num_experts], max_slots);
    const int lane = threadIdx.x & 31;
    for (int slot = blockIdx.x * kWarps + (threadIdx.x >> 5); slot < slots; slot += gridDim.x * kWarps) {
        const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(slot_token[slot]) * hidden);
        uint4* dst = reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(slot) * hidden);
        for (int v = lane; v < hidden / 8; v += 32) {
            dst[v] = __ldg(src + v);
        }
    }
}

}  // namespace

cudaError_t launchMoeGather(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset, int num_experts,
                            int hidden, int max_slots, uint16_t* x_sorted, int sm_count, cudaStream_t stream,
                            bool programmatic) {
    if (hidden % 8 != 0 || max_slots < 1) {
        return cudaErrorInvalidValue;
    }
    const int wanted = (max_slots + kWarps - 1) / kWarps;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(wanted < 8 * sm_count ? wanted : 8 * sm_count));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = programmatic ? 1 : 0;
    return cudaLaunchKernelEx(&config, gatherKernel, x, slot_token, slot_offset, num_experts, hidden, max_slots,
                              x_sorted);
}

}  // namespace afd::kernels::cuda
