// Permute stage of the MoE layer: groups routing entries by expert on the device (no host synchronisation).
// (1) each entry takes a rank within its expert from a shared-memory counter, with the lanes of a warp that
// share an expert aggregated into one atomic (skewed routing puts many entries on one expert); (2) a block scan
// of the counts gives slot offsets and token-tile offsets; (3) each entry's slot is offset + rank. Up to
// kMoeSingleCtaPermuteEntries entries one CTA does all three; beyond, chunks of kChunk entries are ranked by one CTA
// each (countKernel, per-chunk counts to the workspace) and a second kernel (scatterKernel, one CTA per chunk) scans
// the totals and places its chunk after the earlier chunks' entries of each expert. Slot order within an
// expert is whatever the atomics gave: no result depends on it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/moe_token_tiles.cuh"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kChunk = kThreads;  // entries per CTA on the chunked path (one per thread)
static_assert(kChunk == kMoePermuteChunkEntries, "moePermuteChunks counts the chunked path's CTAs");
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

__device__ __forceinline__ int servedExpertOf(const int32_t* topk_ids, int i, int num_entries, int num_experts) {
    if (i >= num_entries) {
        return -1;
    }
    const int e = topk_ids[i];
    return (e >= 0 && e < num_experts) ? e : -1;
}

// Ranks entries [begin, end) within their experts in counts[] (shared); rank -> entry_slot, -1 if not served.
__device__ void rankEntries(const int32_t* topk_ids, int begin, int end, int num_experts, int* counts,
                            int32_t* entry_slot) {
    const int lane = threadIdx.x & 31;
    const unsigned lanes_below = (1u << lane) - 1u;
    for (int base = begin; base < end; base += kThreads) {
        const int i = base + threadIdx.x;
        const int e = servedExpertOf(topk_ids, i, end, num_experts);
        const unsigned peers = __match_any_sync(kFullMask, e);
        const int leader = __ffs(peers) - 1;
        int first = 0;
        if (lane == leader && e >= 0) {
            first = atomicAdd(&counts[e], __popc(peers));
        }
        first = __shfl_sync(kFullMask, first, leader);
        if (i < end) {
            entry_slot[i] = e >= 0 ? first + __popc(peers & lanes_below) : -1;
        }
    }
}

// Scans counts (thread e holds count_e) into offsets[] (shared) and, if `write`, the global offsets.
__device__ void scanOffsets(int count, int num_experts, int block_tokens, int single_tile_tokens, int* warp_sums,
                            int* offsets, bool write, int32_t* expert_count, int32_t* slot_offset,
                            int32_t* tile_offset) {
    const int tid = threadIdx.x;
    const int tiles = expertTokenTiles(count, block_tokens, single_tile_tokens);
    int total_slots = 0;
    int total_tiles = 0;
    const int slot_start = blockExclusiveScan(count, warp_sums, &total_slots);
    const int tile_start = blockExclusiveScan(tiles, warp_sums, &total_tiles);
    if (tid < num_experts) {
        offsets[tid] = slot_start;
        if (write) {
            expert_count[tid] = count;
            slot_offset[tid] = slot_start;
            tile_offset[tid] = tile_start;
        }
    }
    if (write && tid == 0) {
        slot_offset[num_experts] = total_slots;
        tile_offset[num_experts] = total_tiles;
    }
}

__global__ void __launch_bounds__(kThreads)
    permuteKernel(const int32_t* topk_ids, int num_entries, int top_k, int num_experts, int block_tokens,
                  int single_tile_tokens, int32_t* expert_count, int32_t* slot_offset, int32_t* tile_offset,
                  int32_t* entry_slot, int32_t* slot_token, int32_t* schedule, int schedule_words) {
    __shared__ int counts[kMoeMaxExperts];
    __shared__ int offsets[kMoeMaxExperts];
    __shared__ int warp_sums[33];
    const int tid = threadIdx.x;
    sm90::gridDependencyWait();
    for (int i = tid; schedule != nullptr && i < schedule_words; i += kThreads) {
        schedule[i] = 0;
    }

    for (int e = tid; e < num_experts; e += kThreads) {
        counts[e] = 0;
    }
    __syncthreads();

    // (1) ranks within experts, kept in entry_slot until the offsets are known.
    rankEntries(topk_ids, 0, num_entries, num_experts, counts, entry_slot);
    __syncthreads();

    // (2) offsets of slots and of token tiles.
    scanOffsets(tid < num_experts ? counts[tid] : 0, num_experts, block_tokens, single_tile_tokens, warp_sums, offsets,
                true, expert_count, slot_offset, tile_offset);
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

// Chunked path, kernel 1: ranks chunk blockIdx.x within its experts; its counts go to chunk_counts[chunk][e].
__global__ void __launch_bounds__(kThreads)
    countKernel(const int32_t* topk_ids, int num_entries, int num_experts, int32_t* entry_slot, int32_t* chunk_counts,
                int32_t* ready_words) {
    __shared__ int counts[kMoeMaxExperts];
    sm90::gridDependencyWait();
    sm90::launchDependents();
    if (ready_words != nullptr && blockIdx.x == 0 && threadIdx.x < 2) {
        ready_words[threadIdx.x] = 0;  // the scatter kernel counts them after this grid has completed
    }
    for (int e = threadIdx.x; e < num_experts; e += kThreads) {
        counts[e] = 0;
    }
    __syncthreads();
    const int begin = blockIdx.x * kChunk;
    rankEntries(topk_ids, begin, min(num_entries, begin + kChunk), num_experts, counts, entry_slot);
    __syncthreads();
    for (int e = threadIdx.x; e < num_experts; e += kThreads) {
        chunk_counts[static_cast<int64_t>(blockIdx.x) * num_experts + e] = counts[e];
    }
}

// Chunked path, kernel 2: every CTA scans the experts' totals (CTA 0 writes them out) and places its chunk's
// entries after the entries of the earlier chunks. With ready_words its dependents launch at its start and wait for
// the words (launchMoePermute).
__global__ void __launch_bounds__(kThreads)
    scatterKernel(const int32_t* topk_ids, int num_entries, int top_k, int num_experts, int block_tokens,
                  int single_tile_tokens, int num_chunks, const int32_t* chunk_counts, int32_t* expert_count,
                  int32_t* slot_offset, int32_t* tile_offset, int32_t* entry_slot, int32_t* slot_token,
                  int32_t* schedule, int schedule_words, int32_t* ready_words) {
    __shared__ int offsets[kMoeMaxExperts];
    __shared__ int warp_sums[33];
    const int tid = threadIdx.x;
    sm90::gridDependencyWait();
    if (ready_words != nullptr) {
        sm90::launchDependents();
    }
    for (int i = tid; schedule != nullptr && blockIdx.x == 0 && i < schedule_words; i += kThreads) {
        schedule[i] = 0;
    }
    int total = 0;
    int before = 0;
    if (tid < num_experts) {
        for (int c = 0; c < num_chunks; ++c) {
            const int n = chunk_counts[static_cast<int64_t>(c) * num_experts + tid];
            before += c < static_cast<int>(blockIdx.x) ? n : 0;
            total += n;
        }
    }
    scanOffsets(total, num_experts, block_tokens, single_tile_tokens, warp_sums, offsets, blockIdx.x == 0, expert_count,
                slot_offset, tile_offset);
    __syncthreads();
    if (ready_words != nullptr && blockIdx.x == 0 && tid == 0) {
        sm90::redAddReleaseGpu(ready_words, 1);  // the offsets and the zeroed schedule words (the barrier above)
    }
    if (tid < num_experts) {
        offsets[tid] += before;
    }
    __syncthreads();
    if (ready_words == nullptr) {
        sm90::launchDependents();
    }
    const int i = blockIdx.x * kChunk + tid;
    if (i < num_entries) {
        const int rank = entry_slot[i];
        if (rank >= 0) {
            const int slot = offsets[topk_ids[i]] + rank;
            entry_slot[i] = slot;
            slot_token[slot] = i / top_k;
        }
    }
    if (ready_words != nullptr) {
        __syncthreads();
        if (tid == 0) {
            sm90::redAddReleaseGpu(ready_words + 1, 1);  // this chunk's slots (the barrier above)
        }
    }
}

}  // namespace

cudaError_t launchMoePermute(const MoePermuteParams& p, cudaStream_t stream) {
    if (p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.block_tokens < 1 ||
        p.single_tile_tokens < p.block_tokens || p.top_k < 1) {
        return cudaErrorInvalidValue;
    }
    cudaLaunchAttribute attr[1];
    const int chunks = moePermuteChunks(p.num_entries);
    if (chunks == 0) {
        const cudaLaunchConfig_t config = pdlLaunchConfig(1, kThreads, stream, true, attr);
        return cudaLaunchKernelEx(&config, permuteKernel, p.topk_ids, p.num_entries, p.top_k, p.num_experts,
                                  p.block_tokens, p.single_tile_tokens, p.expert_count, p.slot_offset, p.tile_offset,
                                  p.entry_slot, p.slot_token, p.schedule, p.schedule_words);
    }
    const cudaLaunchConfig_t count_config =
        pdlLaunchConfig(static_cast<unsigned>(chunks), kThreads, stream, true, attr);
    const cudaError_t err = cudaLaunchKernelEx(&count_config, countKernel, p.topk_ids, p.num_entries, p.num_experts,
                                               p.entry_slot, p.chunk_counts, p.ready_words);
    if (err != cudaSuccess) {
        return err;
    }
    const cudaLaunchConfig_t scatter_config =
        pdlLaunchConfig(static_cast<unsigned>(chunks), kThreads, stream, true, attr);
    return cudaLaunchKernelEx(&scatter_config, scatterKernel, p.topk_ids, p.num_entries, p.top_k, p.num_experts,
                              p.block_tokens, p.single_tile_tokens, chunks, static_cast<const int32_t*>(p.chunk_counts),
                              p.expert_count, p.slot_offset, p.tile_offset, p.entry_slot, p.slot_token, p.schedule,
                              p.schedule_words, p.ready_words);
}

}  // namespace afd::kernels::cuda
