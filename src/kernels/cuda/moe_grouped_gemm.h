// Internal launch interface of the grouped expert GEMMs (moe_grouped_gemm.cuh), shared by the host code in
// moe_cuda.cpp and the per-configuration .cu files. Host-only header (includes the CUDA driver types).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {

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
    int inter = 0;    // I: gate-up rows of an expert are [0, I), up rows [I, 2I)
    int a_rows = 0;   // weight rows of one expert in the map: 2I (gate-up) or H (down)
    int n_tiles = 0;  // weight-row tiles per expert
    // Gate-up only: 1 when the weight map is the 5-D interleaved view of w13 (one TMA per stage), 0 when it is
    // the plain 2-D view [E * 2I, H] with boxes of 8 rows (eight TMAs per consumer and stage).
    int a_interleaved = 0;
    // 1 when each weight tile is read by about one item (mean tokens per expert within one token tile): weights
    // stream through L2 with evict_first; 0: several token tiles re-read each weight tile, evict normally.
    int weights_read_once = 1;
    // Small batches (cp.async token shapes only): > 0 = number of routing entries (<= kFusedRoutingEntries) from
    // which both kernels compute the routing themselves (moe_fused_routing.cuh); the permute kernel is skipped.
    int fused_entries = 0;
    int top_k = 0;
    const int32_t* topk_ids = nullptr;  // [fused_entries]
    struct RoutingOut {                 // written by the gate-up kernel's CTA 0 when fused_entries > 0
        int32_t* expert_count = nullptr;
        int32_t* slot_offset = nullptr;
        int32_t* tile_offset = nullptr;
        int32_t* entry_slot = nullptr;
        int32_t* slot_token = nullptr;
    } routing_out;
};

// Most routing entries (T * top_k) for which the GEMM kernels compute the routing themselves.
inline constexpr int kFusedRoutingEntries = 256;

// Static shape of a tile configuration.
struct TileShape {
    int consumers;     // consumer warpgroups (1 or 2)
    int m_blocks;      // blocks of 64 weight rows per consumer (one accumulator each)
    int block_tokens;  // most tokens of one item
    int stages;        // pipeline depth
    // Token tiles by TMA from rows in slot order (x_sorted for gate-up, h for down; always full boxes), instead
    // of 16-byte cp.async gathers by the producer warpgroup.
    bool tma_tokens;
};
// NOTE: the .cu file of each configuration instantiates its kernels from these constants.
inline constexpr TileShape kSmall16Shape{1, 1, 16, 10, false};
inline constexpr TileShape kSmall32Shape{1, 1, 32, 8, false};
inline constexpr TileShape kSmall64Shape{1, 1, 64, 6, false};
inline constexpr TileShape kSmall128Shape{1, 1, 128, 4, false};
inline constexpr TileShape kWide128Shape{2, 1, 128, 6, true};
inline constexpr TileShape kWide256Shape{2, 1, 256, 4, true};
inline constexpr TileShape kWide256GatherShape{2, 1, 256, 4, false};
inline constexpr TileShape kTall128Shape{2, 2, 128, 4, true};
TileShape tileShape(MoeTileConfig config);

// Output columns one item covers: gate-up 32 per 64-row block (intermediate columns), down 64 per block.
inline int gateUpColumnsPerItem(const TileShape& s) { return 32 * s.consumers * s.m_blocks; }
inline int downRowsPerItem(const TileShape& s) { return 64 * s.consumers * s.m_blocks; }

// Launches the persistent gate-up (gate_up) or down kernel of a configuration on `stream` (one .cu file each);
// returns the launch status. `tmap_a` describes the weights: gate-up the 5-D interleaved view of w13 with box
// {64, 8, 2, 4 * blocks, 1} (a_interleaved) or the 2-D view with box {64, 8}; down w2 as [E * H, I] with box
// {64, 64 * blocks} (blocks = consumers * m_blocks). `tmap_b` (tma_tokens shapes only) describes b_src as
// [rows, b_ld] with box {64, min(64, block_tokens)}, `tmap_b_full` the same with box {64, block_tokens} (one box
// for items that fill the tile). All bf16 with the 128-byte swizzle. `sm_count` sizes the persistent grid.
#define AFD_DECLARE_GROUPED_GEMM(name)                                                                             \
    cudaError_t launchGroupedGemm##name(bool gate_up, const CUtensorMap& tmap_a, const CUtensorMap& tmap_b,        \
                                        const CUtensorMap& tmap_b_full, const GroupedGemmArgs& args, int sm_count, \
                                        cudaStream_t stream, bool programmatic)
AFD_DECLARE_GROUPED_GEMM(Small16);
AFD_DECLARE_GROUPED_GEMM(Small32);
AFD_DECLARE_GROUPED_GEMM(Small64);
AFD_DECLARE_GROUPED_GEMM(Small128);
AFD_DECLARE_GROUPED_GEMM(Wide128);
AFD_DECLARE_GROUPED_GEMM(Wide256);
AFD_DECLARE_GROUPED_GEMM(Wide256Gather);
AFD_DECLARE_GROUPED_GEMM(Tall128);
#undef AFD_DECLARE_GROUPED_GEMM

}  // namespace afd::kernels::cuda
