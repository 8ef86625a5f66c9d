// Token gather of the MoE layer for the tile shapes that load token tiles by TMA: x_sorted[slot] = x[token of
// slot] for the served slots, so that each expert's tokens are contiguous rows. Token-major: one warp per token
// reads its row of x once into registers and writes it to each of the token's slots, so x crosses DRAM once
// (read in slot order, each row of x would be fetched top_k times once x outgrows L2).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_attributes.h"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecPerLane = 8;  // 16-byte vectors of a row each lane holds at once (2048 bf16 = one pass)

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
#pragma unroll
            for (int q = 0; q < kVecPerLane; ++q) {
                const int v = v0 + q * 32 + lane;
                if (v < row_vectors) {
                    row[q] = __ldg(src + v);
                }
            }
            for (int j = 0; j < top_k; ++j) {
                const int slot = entry_slot[static_cast<int64_t>(t) * top_k + j];  // the same for the whole warp
                if (slot < 0) {
                    continue;
                }
                uint4* dst = reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(slot) * hidden);
#pragma unroll
                for (int q = 0; q < kVecPerLane; ++q) {
                    const int v = v0 + q * 32 + lane;
                    if (v < row_vectors) {
                        dst[v] = row[q];
                    }
                }
            }
        }
    }
}

}  // namespace

cudaError_t launchMoeGather(const uint16_t* x, const int32_t* entry_slot, int num_tokens, int top_k, int hidden,
                            uint16_t* x_sorted, int sm_count, cudaStream_t stream, bool programmatic) {
    if (hidden % 8 != 0 || num_tokens < 1 || top_k < 1) {
        return cudaErrorInvalidValue;
    }
    // The largest shared-memory carveout, as the GEMM kernels': an SM set up for a smaller one would not take the
    // gate-up CTAs that stream beside this kernel's (moe_gemm_tiles.cuh, kStreamsBesideGather) until its CTAs have
    // left.
    static std::atomic<uint64_t> configured_devices{0};
    const cudaError_t err = configureOncePerDevice(configured_devices, [] {
        return cudaFuncSetAttribute(gatherKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared);
    });
    if (err != cudaSuccess) {
        return err;
    }
    const int wanted = (num_tokens + kWarps - 1) / kWarps;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(wanted < 8 * sm_count ? wanted : 8 * sm_count));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = programmatic ? 1 : 0;
    return cudaLaunchKernelEx(&config, gatherKernel, x, entry_slot, num_tokens, top_k, hidden, x_sorted);
}

}  // namespace afd::kernels::cuda
