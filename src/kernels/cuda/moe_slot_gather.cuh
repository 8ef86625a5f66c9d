// Slot-order gather of x into x_sorted, shared by the gather kernel that runs beside wide128's gate-up kernel
// (moe_gather.cu) and the gate-up kernels that copy their own token rows (moe_gemm_producer.cuh): a warp copies each
// row, and once a group of slots is written its rows are added to their experts' counts with release, which the gate-up
// producers wait for (acquire) before their token TMA loads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {

// One row of row_vectors 16-byte vectors from src to dst by the 32 lanes of a warp, kVectors per lane in flight.
template <int kVectors>
__device__ __forceinline__ void copyRowByWarp(const uint4* src, uint4* dst, int lane, int row_vectors) {
#pragma unroll 1
    for (int v0 = 0; v0 < row_vectors; v0 += 32 * kVectors) {
        uint4 row[kVectors];
#pragma unroll
        for (int q = 0; q < kVectors; ++q) {
            const int v = v0 + q * 32 + lane;
            if (v < row_vectors) {
                row[q] = __ldg(src + v);
            }
        }
#pragma unroll
        for (int q = 0; q < kVectors; ++q) {
            const int v = v0 + q * 32 + lane;
            if (v < row_vectors) {
                dst[v] = row[q];
            }
        }
    }
}

// Adds the written slots [first, end) to their experts' counts in `gathered` (release: the caller has ordered its
// threads' row stores before this, with a warp or CTA barrier). offsets [num_experts + 1] are the experts' first slots.
__device__ __forceinline__ void countGatheredSlots(const int* offsets, int num_experts, int first, int end,
                                                   int32_t* gathered) {
    // The last expert whose first slot is <= first, then the next ones up to end.
    int lo = 0;
    int hi = num_experts - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (offsets[mid] <= first) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    for (int e = lo; first < end; ++e) {
        const int last = min(end, offsets[e + 1]);
        if (last > first) {
            sm90::redAddReleaseGpu(gathered + e, last - first);
            first = last;
        }
    }
}

// Gate-up kernels that copy their own token rows (GroupedGemmArgs::gather_x): warps_per_cta warps of every CTA (warp
// warp_in_cta here) copy the slots [begin, min(end, total)) of x [T, hidden] into x_sorted in slot order, groups of
// kRows slots dealt round robin over the grid's gathering warps, so the experts complete in slot order (the order of
// the GEMM items), and count each group once its rows are written. A warp has its group's rows in flight at once.
// Nothing here waits, so every count completes. offsets [num_experts + 1].
template <int kVectors, int kRows>
__device__ void gatherSlotsByWarps(const uint16_t* x, const int32_t* slot_token, uint16_t* x_sorted, int hidden,
                                   const int* offsets, int num_experts, int32_t* gathered, int begin, int end,
                                   int warps_per_cta, int warp_in_cta) {
    static_assert(kRows <= 32, "a lane per slot token");
    const int lane = threadIdx.x & 31;
    end = min(end, offsets[num_experts]);
    const int row_vectors = hidden / 8;
    const int stride = static_cast<int>(gridDim.x) * warps_per_cta * kRows;
    for (int group = begin + (static_cast<int>(blockIdx.x) * warps_per_cta + warp_in_cta) * kRows; group < end;
         group += stride) {
        const int rows = min(kRows, end - group);
        // A coherent load: with GroupedGemmArgs::permute_ready the scatter kernel may have written it during this grid.
        const int my_token = lane < rows ? slot_token[group + lane] : 0;
#pragma unroll 1
        for (int v0 = 0; v0 < row_vectors; v0 += 32 * kVectors) {
            uint4 held[kRows][kVectors];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int64_t token = __shfl_sync(0xffffffffu, my_token, r);
                const uint4* src = reinterpret_cast<const uint4*>(x + token * hidden);
#pragma unroll
                for (int q = 0; q < kVectors; ++q) {
                    const int v = v0 + q * 32 + lane;
                    if (r < rows && v < row_vectors) {
                        held[r][q] = __ldg(src + v);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                uint4* dst = reinterpret_cast<uint4*>(x_sorted + static_cast<int64_t>(group + r) * hidden);
#pragma unroll
                for (int q = 0; q < kVectors; ++q) {
                    const int v = v0 + q * 32 + lane;
                    if (r < rows && v < row_vectors) {
                        dst[v] = held[r][q];
                    }
                }
            }
        }
        __syncwarp();  // every lane's stores are ordered before lane 0's release
        if (lane == 0) {
            countGatheredSlots(offsets, num_experts, group, group + rows, gathered);
        }
    }
}

// A gate-up producer about to load an expert's token rows by TMA: waits until `rows` of them are counted (acquire),
// then orders its later TMA loads (async proxy) after what that made visible.
__device__ __forceinline__ void waitExpertRows(const int32_t* gathered, int expert, int rows) {
    sm90::waitAtLeastAcquire(gathered + expert, rows);
    sm90::fenceProxyAsyncGlobal();
}

// A producer that has issued its last copy reads the per-expert counts (gathered rows, or h_ready in the down kernel)
// no more: the last CTA of the grid to get here zeroes them and the exit count, for the next launch.
__device__ __forceinline__ void releaseExpertCounts(int32_t* counts, int32_t* exit_count, int num_experts) {
    if (atomicAdd(exit_count, 1) == static_cast<int>(gridDim.x) - 1) {
        for (int e = 0; e < num_experts; ++e) {
            counts[e] = 0;
        }
        *exit_count = 0;
    }
}

}  // namespace afd::kernels::cuda
