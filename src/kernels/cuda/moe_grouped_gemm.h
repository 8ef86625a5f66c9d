// Internal launch interface of the grouped expert GEMMs (moe_grouped_gemm.cuh): the kernels' arguments and the
// launchers of the tile configurations (kMoeTiles), shared by the host code (moe_stage_launch.cpp) and the
// per-configuration .cu files. Host-only header (includes the CUDA driver types).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe_cuda_plan.h"

namespace afd::kernels::cuda {

// Words of one GEMM kernel's dynamic-schedule counters (GroupedGemmArgs::schedule).
inline constexpr int kScheduleWords = 2;

// Arguments of one grouped GEMM launch (device pointers; shapes in elements).
//   gate-up: out = h [slots, I], b_src = x [T, H] gathered through slot_token (or x_sorted [slots, H] in slot
//            order when the tokens come by TMA), A = w13
//   down:    out = y [slots, H], b_src = h [slots, I] in slot order, A = w2
struct GroupedGemmArgs {
    const uint16_t* b_src = nullptr;       // bf16 activations, rows of b_ld elements
    const int32_t* slot_token = nullptr;   // [slots] token of each slot (gate-up only)
    const int32_t* slot_offset = nullptr;  // [E + 1]
    const int32_t* tile_offset = nullptr;  // [E + 1] token-tile prefix for the config's tile of tokens
    uint16_t* out = nullptr;               // bf16, rows of out_ld elements
    int num_experts = 0;
    int k = 0;        // reduction length: H (gate-up) or I (down)
    int b_ld = 0;     // row stride of b_src
    int out_ld = 0;   // row stride of out
    int n_tiles = 0;  // weight-row tiles per expert
    // Down kernel with the combine by part (MoeCudaPlan::combine_parts; launchMoeCombine): the items go
    // weight-tile-major over every expert (all of weight tile 0's items, then tile 1's …), and each finished item is
    // counted in part_done[its weight tile] (release), so that the combine sums each block of hidden rows once it is
    // complete. Null: expert-major, nothing counted.
    int32_t* part_done = nullptr;
    // At most this many token tiles (the routing entries: each tile holds one at least), so at most max_token_tiles
    // x n_tiles items: the grid is no larger, which leaves the other slots of the SMs to the next kernel (the down
    // kernel's CTAs stream their first weights beside a one-token gate-up kernel).
    int max_token_tiles = 0;
    // 1 when each weight tile is read by about one item (mean tokens per expert within one token tile): weights
    // stream through L2 with evict_first; 0: several token tiles re-read each weight tile, evict normally.
    int weights_read_once = 1;
    // With weights_read_once: 1 = the items of an expert with several token tiles still copy its weights with
    // evict_last (MoeCudaPlan::weights_shared_per_item).
    int weights_shared_per_item = 0;
    // 1: each consumer releases a stage as soon as its wgmma retire (MoeCudaPlan::release_early); 0: after the next
    // stage's wgmma are issued.
    int release_early = 0;
    // 1 = issue the first items' weight copies before waiting for the previous kernel: the down kernel
    // (MoeCudaPlan::down_prefetch) and wide128's gate-up kernel (Layout::kStreamsBesideGather), whose token rows come
    // from the gather kernel beside it. The gate-up kernels always set it.
    int prefetch_before_wait = 1;
    // Gate-up kernel streaming beside the slot-order gather (launchMoeGather, MoeCudaPlan::gather_kernel):
    // gathered [E] counts each expert's rows of x_sorted as they are written; the producer waits for its item's
    // expert to be complete before loading its token rows, and no thread waits for the gather grid. gathered_exit:
    // the CTAs done taking and reading the counts; the last one zeroes them and itself for the next launch.
    int32_t* gathered = nullptr;
    int32_t* gathered_exit = nullptr;
    // Down kernel starting per expert (MoeCudaPlan::down_per_expert; the item-ring tiles, no fused combine;
    // moe_expert_ready.cuh): the gate-up kernel adds each finished item to h_ready[expert]; the down producer
    // waits for h_ready_items_per_tile (the gate-up kernel's n_tiles) x the expert's token tiles instead of the gate-up
    // grid, and no down thread waits for that grid. h_ready_exit: the down CTAs done reading; the last one zeroes them
    // and itself (the permute stage zeroes them too). Both kernels of a layer get the same h_ready.
    int32_t* h_ready = nullptr;
    int32_t* h_ready_exit = nullptr;
    int h_ready_items_per_tile = 0;
    // Gate-up kernels that gather their own token rows (gather_x), launched at the permute's scatter kernel's start
    // (MoeCudaPlan::gate_up_on_permute_words): instead of waiting for the scatter grid, the CTAs wait (acquire) for
    // permute_ready[0] >= 1 before they read the offsets, every thread that reads slot_token for permute_ready[1] >=
    // permute_ready_ctas, and the producer for that too before it lets the down kernel launch (which reads the
    // permute's words before its own wait); thread 0 waits for the scatter grid at the end, so that this grid still
    // completes after it. Null: the CTAs wait for the scatter grid first.
    const int32_t* permute_ready = nullptr;
    int permute_ready_ctas = 0;
    // Gate-up kernels of the other token-TMA shapes (MoeCudaPlan::gather_in_gate_up): gather_x = x [T, k], gathered by
    // the kernel's own producer warps 1-3 into gather_out = x_sorted in slot order and counted in `gathered` as above
    // (no gather kernel). nullptr: a gather kernel wrote x_sorted.
    const uint16_t* gather_x = nullptr;
    uint16_t* gather_out = nullptr;
    // Small batches (MoeCudaPlan::fused_routing): > 0 = number of routing entries (<= kMoeFusedRoutingEntries) from
    // which both kernels compute the routing themselves (moe_fused_routing.cuh); the permute kernel is skipped.
    int fused_entries = 0;
    // Dynamic scheduling (MoeCudaPlan::dynamic_schedule): [0] counts the items taken after each CTA's first
    // (blockIdx.x), [1] the CTAs done taking. Zero before the launch (the
    // kernel before it in the layer zeroes them) and reset by the last CTA to finish taking, so a replay alone finds
    // them zero. nullptr: static round robin.
    int32_t* schedule = nullptr;
    int32_t* down_schedule = nullptr;  // gate-up only: the down kernel's schedule words, zeroed by CTA 0
    int top_k = 0;
    const int32_t* topk_ids = nullptr;  // [fused_entries]
    struct RoutingOut {                 // written by the gate-up kernel's CTA 0 when fused_entries > 0
        int32_t* expert_count = nullptr;
        int32_t* slot_offset = nullptr;
        int32_t* tile_offset = nullptr;
        int32_t* entry_slot = nullptr;
        int32_t* slot_token = nullptr;
    } routing_out;
    // Small batches (MoeCudaPlan::fused_combine): the down kernel also does the combine stage. Each
    // consumer counts its 64-row block of hidden rows as written in counters[block]; the arrival that completes a
    // block (one per token tile of every expert) sums that block of y into out. The gate-up kernel's CTA 0 zeroes
    // the counters; the completing arrival resets its counter. out == nullptr: no fused combine.
    struct FusedCombine {
        int32_t* counters = nullptr;          // [num_counters]
        const int32_t* entry_slot = nullptr;  // [num_tokens * top_k], -1 when not served
        const float* topk_weights = nullptr;  // [num_tokens * top_k]
        uint16_t* out = nullptr;              // [num_tokens, hidden] bf16 (the layer's output)
        int num_tokens = 0;
        int num_counters = 0;  // hidden / 64
    } combine;
};

// One grouped GEMM launch: the gate-up (gate_up) or down kernel of a configuration, persistent over the SMs.
// `weights` describes the packed weights (moePackWeightsCuda) as the 5-D view (k, row, 64-row unit, k-block, expert)
// with box {64, 64, blocks, 1, 1} (blocks = consumers * m_blocks; moe_tensor_maps.h). The token maps (tma_tokens
// shapes only, else zero) describe args.b_src as [rows, b_ld]: `tokens` with boxes of tokenBoxRows, `full_tokens`
// with boxes of the whole tile (tiles up to 256 tokens), for items that fill it. All bf16 with the 128-byte swizzle.
struct GroupedGemmParams {
    bool gate_up = true;
    CUtensorMap weights;
    CUtensorMap tokens;
    CUtensorMap full_tokens;
    GroupedGemmArgs args;
    int sm_count = 0;  // sizes the persistent grid
};

// The launcher of one tile configuration (moe_gemm_launch.cuh; each configuration's .cu file instantiates its own):
// launches with programmatic dependent launch on `stream`, returns the launch status.
template <MoeTileConfig kTile>
cudaError_t launchGroupedGemm(const GroupedGemmParams& params, cudaStream_t stream);

// The launcher of `tile` (not kAuto), from kMoeTiles.
cudaError_t launchGroupedGemm(MoeTileConfig tile, const GroupedGemmParams& params, cudaStream_t stream);

}  // namespace afd::kernels::cuda
