// Routing computed inside the grouped GEMM kernels for small batches (at most kMoeFusedRoutingEntries routing
// entries), so that no separate permute kernel sits between the router and the first weight bytes. Every CTA
// of both GEMM kernels derives the same slots from topk_ids: slots are grouped by expert in entry order (an
// entry's rank is the number of earlier entries on its expert), which is deterministic. The gate-up kernel's
// CTA 0 also writes the permute stage's outputs for the down and combine kernels.
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"

namespace afd::kernels::cuda::grouped_gemm {

// Most routing entries for which one warp computes the routing in compact form (fusedRoutingWarp).
inline constexpr int kWarpRoutingEntries = 32;

// Routing of at most 32 entries (T * top_k, a decode step of one to four tokens) by warp 0 alone, in compact
// form: rows [0, m) are the m touched experts in increasing order, experts[r] their ids, tiles[r] / slots[r]
// their first token tile / slot, and tiles[m] / slots[m] the totals. Slots are the same as fusedRouting's (grouped
// by expert in entry order), and so are the permute outputs written with write_outputs. No global round trip
// beyond the ids and one __syncthreads, which is what a one-token step waits for before its first weight copy.
// With a fused combine (args.combine.out) the entries' slots and routing weights are also kept in
// s_entry_slot / s_weight [32], so the combining arrival reads only y. Returns m (to every thread).
__device__ __forceinline__ int fusedRoutingWarp(const GroupedGemmArgs& args, int block_tokens, bool write_outputs,
                                                int* s_experts, int* s_slot_token, int* s_rows, int* tiles, int* slots,
                                                int* s_entry_slot, float* s_weight) {
    const int n = args.fused_entries;
    if (threadIdx.x < 32) {
        const int lane = static_cast<int>(threadIdx.x);
        int id = -1;
        if (lane < n) {
            const int e = args.topk_ids[lane];
            id = (e >= 0 && e < args.num_experts) ? e : -1;
            if (args.combine.out != nullptr) {
                s_weight[lane] = args.combine.topk_weights[lane];
            }
        }
        const unsigned same = __match_any_sync(0xffffffffu, id);  // lanes of my expert (or the unserved lanes)
        const int count = __popc(same);
        const int rank = __popc(same & ((1u << lane) - 1u));  // earlier entries on my expert
        const bool first = id >= 0 && rank == 0;
        const int my_tiles = first ? (count + block_tokens - 1) / block_tokens : 0;
        // Touched experts below mine: their row order, slots and tiles before my expert's.
        int order = 0;
        int slot_before = 0;
        int tile_before = 0;
#pragma unroll 4
        for (int j = 0; j < 32; ++j) {
            const int id_j = __shfl_sync(0xffffffffu, id, j);
            const int count_j = __shfl_sync(0xffffffffu, first ? count : 0, j);
            const int tiles_j = __shfl_sync(0xffffffffu, my_tiles, j);
            if (count_j > 0 && id_j < id) {
                ++order;
                slot_before += count_j;
                tile_before += tiles_j;
            }
        }
        int total_tiles = my_tiles;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            total_tiles += __shfl_xor_sync(0xffffffffu, total_tiles, offset);
        }
        const int rows = __popc(__ballot_sync(0xffffffffu, first));
        const int served = __popc(__ballot_sync(0xffffffffu, id >= 0));
        if (first) {
            s_experts[order] = id;
            tiles[order] = tile_before;
            slots[order] = slot_before;
        }
        if (lane == 0) {
            tiles[rows] = total_tiles;
            slots[rows] = served;
            *s_rows = rows;
        }
        const int slot = id >= 0 ? slot_before + rank : -1;
        if (id >= 0) {
            s_slot_token[slot] = lane / args.top_k;
            if (write_outputs) {
                args.routing_out.slot_token[slot] = lane / args.top_k;
            }
        }
        if (lane < n) {
            s_entry_slot[lane] = slot;
            if (write_outputs) {
                args.routing_out.entry_slot[lane] = slot;
            }
        }
    }
    __syncthreads();
    const int rows = *s_rows;
    if (write_outputs) {
        // The permute stage's outputs over all experts: expert e's offsets are those of the first touched expert
        // >= e (the totals past the last).
        for (int e = threadIdx.x; e <= args.num_experts; e += blockDim.x) {
            int r = 0;
            while (r < rows && s_experts[r] < e) {
                ++r;
            }
            if (e < args.num_experts) {
                args.routing_out.expert_count[e] = (r < rows && s_experts[r] == e) ? slots[r + 1] - slots[r] : 0;
            }
            args.routing_out.slot_offset[e] = slots[r];
            args.routing_out.tile_offset[e] = tiles[r];
        }
    }
    return rows;
}

// Shared-memory scratch: ids [kMoeFusedRoutingEntries], slot tokens [kMoeFusedRoutingEntries], counts [E].
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
