// Routing computed inside the grouped GEMM kernels for small batches (at most kFusedRoutingEntries routing
// entries), so that no separate permute kernel sits between the router and the first weight bytes. Every CTA
// of both GEMM kernels derives the same slots from topk_ids: slots are grouped by expert in entry order (an
// entry's rank is the number of earlier entries on its expert), which is deterministic. The gate-up kernel's
// CTA 0 also writes the permute stage's outputs for the down and combine kernels.
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"

namespace afd::kernels::cuda::grouped_gemm {

// Shared-memory scratch: ids [kFusedRoutingEntries], slot tokens [kFusedRoutingEntries], counts [E].
__device__ __forceinline__ void fusedRouting(const GroupedGemmArgs& args, int block_tokens, bool write_outputs,
                                             int* s_ids, int* s_slot_token, int* s_counts, int* tiles, int* slots) {
    const int n = args.fused_entries;
    const int num_experts = args.num_experts;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = args.topk_ids[i];
        s_ids[i] = (e >= 0 && e < num_experts) ? e : -1;
    }
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
        s_counts[e] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (s_ids[i] >= 0) {
            atomicAdd(&s_counts[s_ids[i]], 1);
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        // Exclusive scans of the counts and of the token tiles, 32 experts per step.
        const int lane = threadIdx.x;
        int slot_carry = 0;
        int tile_carry = 0;
        for (int base = 0; base < num_experts; base += 32) {
            const int e = base + lane;
            const int count = e < num_experts ? s_counts[e] : 0;
            const int tile = (count + block_tokens - 1) / block_tokens;
            int slot_incl = count;
            int tile_incl = tile;
#pragma unroll
            for (int offset = 1; offset < 32; offset <<= 1) {
                const int s = __shfl_up_sync(0xffffffffu, slot_incl, offset);
                const int t = __shfl_up_sync(0xffffffffu, tile_incl, offset);
                if (lane >= offset) {
                    slot_incl += s;
                    tile_incl += t;
                }
            }
            if (e < num_experts) {
                slots[e] = slot_carry + slot_incl - count;
                tiles[e] = tile_carry + tile_incl - tile;
            }
            slot_carry += __shfl_sync(0xffffffffu, slot_incl, 31);
            tile_carry += __shfl_sync(0xffffffffu, tile_incl, 31);
        }
        if (lane == 0) {
            slots[num_experts] = slot_carry;
            tiles[num_experts] = tile_carry;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = s_ids[i];
        int slot = -1;
        if (e >= 0) {
            int rank = 0;
            for (int j = 0; j < i; ++j) {
                rank += s_ids[j] == e ? 1 : 0;
            }
            slot = slots[e] + rank;
            s_slot_token[slot] = i / args.top_k;
            if (write_outputs) {
                args.routing_out.slot_token[slot] = i / args.top_k;
            }
        }
        if (write_outputs) {
            args.routing_out.entry_slot[i] = slot;
        }
    }
    if (write_outputs) {
        for (int e = threadIdx.x; e <= num_experts; e += blockDim.x) {
            if (e < num_experts) {
                args.routing_out.expert_count[e] = s_counts[e];
            }
            args.routing_out.slot_offset[e] = slots[e];
            args.routing_out.tile_offset[e] = tiles[e];
        }
    }
    __syncthreads();
}

}  // namespace afd::kernels::cuda::grouped_gemm
