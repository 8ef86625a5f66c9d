// Permute stage of the MoE layer: groups routing entries by expert on the device (no host synchronisation).
// One CTA of 1024 threads: (1) each entry takes a rank within its expert from a shared-memory counter, with the
// lanes of a warp that share an expert aggregated into one atomic (skewed routing puts many entries on one
// expert); (2) a block scan of the counts gives slot offsets and token-tile offsets; (3) each entry's slot is
// offset + rank. Slot order within an expert is whatever the atomics gave: no result depends on it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr unsigned kFullMask = 0xffffffffu;

// Exclusive scan of one value per thread over the block; *total receives the sum.
__device__ int blockExclusiveScan(int value, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    int inclusive = value;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const int other = __shfl_up_sync(kFullMask, inclusive, offset);
        if (lane >= offset) {
            inclusive += other;
        }
    }
    if (lane == 31) {
        warp_sums[warp] = inclusive;
    }
    __syncthreads();
    if (warp == 0) {
        int sum = warp_sums[lane];
        int scanned = sum;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            const int other = __shfl_up_sync(kFullMask, scanned, offset);
            if (lane >= offset) {
                scanned += other;
            }
        }
        warp_sums[lane] = scanned - sum;  // exclusive prefix of the warp sums
        if (lane == 31) {
            warp_sums[32] = scanned;
        }
    }
    __syncthreads();
    const int result = warp_sums[warp] + inclusive - value;
    *total = warp_sums[32];
    __syncthreads();  // warp_sums may be reused by the caller's next scan
    return result;
}

__device__ __forceinline__ int servedExpert(const int32_t* topk_ids, int i, int num_entries, int num_experts) {
    if (i >= num_entries) {
        return -1;
    }
    const int e = topk_ids[i];
    return (e >= 0 && e < num_experts) ? e : -1;
}

__global__ void __launch_bounds__(kThreads) permuteKernel(const int32_t* topk_ids, int num_entries, int top_k,
                                                          int num_experts, int block_tokens, int32_t* expert_count,
                                                          int32_t* slot_offset, int32_t* tile_offset,
                                                          int32_t* entry_slot, int32_t* slot_token) {
    __shared__ int counts[kMaxPermuteExperts];
    __shared__ int offsets[kMaxPermuteExperts];
    __shared__ int warp_sums[33];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    sm90::gridDependencyWait();

    for (int e = tid; e < num_experts; e += kThreads) {
        counts[e] = 0;
    }
    __syncthreads();

    // (1) ranks within experts, kept in entry_slot until the offsets are known.
    const unsigned lanes_below = (1u << lane) - 1u;
    for (int base = 0; base < num_entries; base += kThreads) {
        const int i = base + tid;
        const int e = servedExpert(topk_ids, i, num_entries, num_experts);
        const unsigned peers = __match_any_sync(kFullMask, e);
        const int leader = __ffs(peers) - 1;
        int first = 0;
        if (lane == leader && e >= 0) {
            first = atomicAdd(&counts[e], __popc(peers));
        }
        first = __shfl_sync(kFullMask, first, leader);
        if (i < num_entries) {
            entry_slot[i] = e >= 0 ? first + __popc(peers & lanes_below) : -1;
        }
    }
    __syncthreads();

    // (2) offsets of slots and of token tiles.
    const int count = tid < num_experts ? counts[tid] : 0;
    const int tiles = (count + block_tokens - 1) / block_tokens;
    int total_slots = 0;
    int total_tiles = 0;
    const int slot_start = blockExclusiveScan(count, warp_sums, &total_slots);
    const int tile_start = blockExclusiveScan(tiles, warp_sums, &total_tiles);
    if (tid < num_experts) {
        offsets[tid] = slot_start;
        expert_count[tid] = count;
        slot_offset[tid] = slot_start;
        tile_offset[tid] = tile_start;
    }
    if (tid == 0) {
        slot_offset[num_experts] = total_slots;
        tile_offset[num_experts] = total_tiles;
    }
    __syncthreads();
    sm90::launchDependents();

    // (3) slots. Each thread revisits exactly the entries it ranked, so it reads its own writes.
    for (int i = tid; i < num_entries; i += kThreads) {
        const int rank = entry_slot[i];
        if (rank >= 0) {
            const int slot = offsets[topk_ids[i]] + rank;
            entry_slot[i] = slot;
            slot_token[slot] = i / top_k;
        }
    }
}

}  // namespace

cudaError_t launchMoePermute(const int32_t* topk_ids, int num_entries, int top_k, int num_experts, int block_tokens,
                             int32_t* expert_count, int32_t* slot_offset, int32_t* tile_offset, int32_t* entry_slot,
                             int32_t* slot_token, cudaStream_t stream, bool programmatic) {
    if (num_experts < 1 || num_experts > kMaxPermuteExperts || block_tokens < 1 || top_k < 1) {
        return cudaErrorInvalidValue;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = programmatic ? 1 : 0;
    return cudaLaunchKernelEx(&config, permuteKernel, topk_ids, num_entries, top_k, num_experts, block_tokens,
                              expert_count, slot_offset, tile_offset, entry_slot, slot_token);
}

}  // namespace afd::kernels::cuda
