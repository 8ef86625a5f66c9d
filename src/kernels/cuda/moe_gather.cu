// Token gather of the MoE layer for the tile shapes that load token tiles by TMA: x_sorted[slot] = x[token of
// slot] for the served slots, so that each expert's tokens are contiguous rows. Token-major: one warp per token
// reads its row of x once into registers and writes it to each of the token's slots, so x crosses DRAM once
// (read in slot order, each row of x would be fetched top_k times once x outgrows L2). The slot-order variant runs
// beside a gate-up kernel that takes each expert's rows as soon as they are complete (launchMoeGatherBySlot).
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
            const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(slot_token[s]) * hidden);
            uint4* dst = reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(s) * hidden);
            for (int v0 = 0; v0 < row_vectors; v0 += 32 * kVecPerLane) {
                uint4 row[kVecPerLane];
#pragma unroll
                for (int q = 0; q < kVecPerLane; ++q) {
                    const int v = v0 + q * 32 + lane;
                    if (v < row_vectors) {
                        row[q] = __ldg(src + v);
                    }
                }
#pragma unroll
                for (int q = 0; q < kVecPerLane; ++q) {
                    const int v = v0 + q * 32 + lane;
                    if (v < row_vectors) {
                        dst[v] = row[q];
                    }
                }
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            // The experts of slots [group, end): the last one whose first slot is <= group, then the next ones.
            const int end = min(group + kWarps, total);
            int lo = 0;
            int hi = num_experts - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (offsets[mid] <= group) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            for (int first = group, e = lo; first < end; ++e) {
                const int last = min(end, offsets[e + 1]);
                if (last > first) {
                    sm90::redAddReleaseGpu(gathered + e, last - first);
                    first = last;
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

cudaError_t launchMoeGatherBySlot(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset,
                                  int num_experts, int hidden, uint16_t* x_sorted, int32_t* gathered, int sm_count,
                                  cudaStream_t stream, bool programmatic) {
    if (hidden % 8 != 0 || num_experts < 1 || num_experts > kMaxPermuteExperts || gathered == nullptr) {
        return cudaErrorInvalidValue;
    }
    static std::atomic<uint64_t> configured_devices{0};
    const cudaError_t err = configureOncePerDevice(configured_devices, [] {
        return cudaFuncSetAttribute(gatherBySlotKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared);
    });
    if (err != cudaSuccess) {
        return err;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(sm_count));  // one CTA per SM, beside the gate-up kernel's
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = programmatic ? 1 : 0;
    return cudaLaunchKernelEx(&config, gatherBySlotKernel, x, slot_token, slot_offset, num_experts, hidden, x_sorted,
                              gathered);
}

}  // namespace afd::kernels::cuda
