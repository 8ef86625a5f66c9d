// Internal launch interface of the grouped expert GEMMs (moe_grouped_gemm.cuh), shared by the host code in
// moe_cuda.cpp and the per-configuration .cu files. Host-only header (includes the CUDA driver types).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe_cuda.h"

#ifndef AFD_MOE_DIAG_SKIP
#define AFD_MOE_DIAG_SKIP 0
#endif

namespace afd::kernels::cuda {

// Diagnostic builds only (CMake AFD_MOE_DIAG_SKIP; 0 in every other build): the work the grouped GEMM kernels skip,
// so that `afd bench moe` bounds what each part costs the layer. Their results are wrong by design.
inline constexpr bool kDiagSkipTokens = (AFD_MOE_DIAG_SKIP & 1) != 0;   // no token copies (TMA boxes, cp.async rows)
inline constexpr bool kDiagSkipMma = (AFD_MOE_DIAG_SKIP & 2) != 0;      // no wgmma
inline constexpr bool kDiagSkipWeights = (AFD_MOE_DIAG_SKIP & 4) != 0;  // no weight copies
inline constexpr bool kDiagSkipStores = (AFD_MOE_DIAG_SKIP & 8) != 0;   // no epilogue stores of h, y
// The gate-up epilogues store h, the down epilogues y, into the first 128 rows only (the same stores as a real run,
// over a small L2 footprint; CTAs race on the rows).
inline constexpr bool kDiagNarrowH = (AFD_MOE_DIAG_SKIP & 16) != 0;
inline constexpr bool kDiagNarrowY = (AFD_MOE_DIAG_SKIP & 32) != 0;
// Work added instead of skipped: tall128's consumer threads also load their items' token rows into registers (16-byte
// loads from x through slot_token where the gate-up kernel gathers x itself, else from the rows in slot order) each
// k-block and discard them: what a kernel whose wgmma A operand comes from registers would load (docs/cuda-moe-notes.md
// v27).
inline constexpr bool kDiagLoadTokens = (AFD_MOE_DIAG_SKIP & 64) != 0;
// The items of an expert with several token tiles whose token tile is odd copy no weights (their stages hold stale
// weights and their token rows): what CTA pairs multicasting a hot expert's weight tile to its token tiles 2j and
// 2j + 1 could save at most, since the pair's second SM would neither read the tile from L2 nor, unlike multicast,
// receive it.
inline constexpr bool kDiagSkipPairedHotWeights = (AFD_MOE_DIAG_SKIP & 128) != 0;
inline constexpr bool kDiagnosticBuild = AFD_MOE_DIAG_SKIP != 0;

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
    // Down kernel of the token-TMA single-CTA shapes, with the combine by part (MoeCudaOptions::combine_by_part;
    // launchMoeCombineByPart): the items go weight-tile-major over every expert (all of weight tile 0's items, then
    // tile 1's …), and each finished item is counted in part_done[its weight tile] (release), so that the combine sums
    // each block of hidden rows once it is complete. Null: expert-major, nothing counted.
    int32_t* part_done = nullptr;
    // At most this many token tiles (the routing entries: each tile holds one at least), so at most max_token_tiles
    // x n_tiles items: the grid is no larger, which leaves the other slots of the SMs to the next kernel (the down
    // kernel's CTAs stream their first weights beside a one-token gate-up kernel).
    int max_token_tiles = 0;
    // 1 when each weight tile is read by about one item (mean tokens per expert within one token tile): weights
    // stream through L2 with evict_first; 0: several token tiles re-read each weight tile, evict normally.
    int weights_read_once = 1;
    // With weights_read_once: 1 = the items of an expert with several token tiles still copy its weights with
    // evict_last (MoeCudaOptions::shared_weights_in_l2).
    int weights_shared_per_item = 0;
    // 1: each consumer releases a stage as soon as its wgmma retire (MoeCudaOptions::early_stage_release);
    // 0: after the next stage's wgmma are issued.
    int release_early = 0;
    // 1 = issue the first items' weight copies before waiting for the previous kernel: the down kernel
    // (MoeCudaOptions::down_prefetch) and the 128-token TMA tile's gate-up kernel (Layout::kStreamsBesideGather,
    // MoeCudaOptions::gate_up_prefetch), whose token rows come from the gather kernel.
    int prefetch_before_wait = 1;
    // Gate-up kernel streaming beside the slot-order gather (launchMoeGatherBySlot, MoeCudaOptions::slot_gather):
    // gathered [E] counts each expert's rows of x_sorted as they are written; the producer waits for its item's
    // expert to be complete before loading its token rows, and no thread waits for the gather grid. gathered_exit:
    // the CTAs done taking and reading the counts; the last one zeroes them and itself for the next launch.
    int32_t* gathered = nullptr;
    int32_t* gathered_exit = nullptr;
    // Down kernel starting per expert (MoeCudaOptions::down_per_expert; token-TMA shapes, no clusters, no fused
    // combine; moe_expert_ready.cuh): the gate-up kernel adds each finished item to h_ready[expert]; the down producer
    // waits for h_ready_items_per_tile (the gate-up kernel's n_tiles) x the expert's token tiles instead of the gate-up
    // grid, and no down thread waits for that grid. h_ready_exit: the down CTAs done reading; the last one zeroes them
    // and itself (the permute stage zeroes them too). Both kernels of a layer get the same h_ready.
    int32_t* h_ready = nullptr;
    int32_t* h_ready_exit = nullptr;
    int h_ready_items_per_tile = 0;
    // Gate-up kernels that gather their own token rows (gather_x), launched at the permute's scatter kernel's start
    // (MoeCudaOptions::gate_up_on_permute_words): instead of waiting for the scatter grid, the CTAs wait (acquire) for
    // permute_ready[0] >= 1 before they read the offsets, every thread that reads slot_token for permute_ready[1] >=
    // permute_ready_ctas, and the producer for that too before it lets the down kernel launch (which reads the
    // permute's words before its own wait); thread 0 waits for the scatter grid at the end, so that this grid still
    // completes after it. Null: the CTAs wait for the scatter grid first.
    const int32_t* permute_ready = nullptr;
    int permute_ready_ctas = 0;
    // Gate-up kernels of the other token-TMA shapes (MoeCudaOptions::slot_gather): gather_x = x [T, k], gathered by the
    // kernel's own producer warps 1-3 into gather_out = x_sorted in slot order and counted in `gathered` as above
    // (no gather kernel). nullptr: a gather kernel wrote x_sorted.
    const uint16_t* gather_x = nullptr;
    uint16_t* gather_out = nullptr;
    // Small batches (cp.async token shapes only): > 0 = number of routing entries (<= kFusedRoutingEntries) from
    // which both kernels compute the routing themselves (moe_fused_routing.cuh); the permute kernel is skipped.
    int fused_entries = 0;
    // Dynamic scheduling (MoeCudaOptions::dynamic_schedule; token-TMA shapes): [0] counts the items taken after each
    // CTA's (CTA pair's) first (blockIdx.x / cluster), [1] the CTAs (pairs) done taking. Zero before the launch (the
    // kernel before it in the layer zeroes them) and reset by the last CTA to finish taking, so a replay alone finds
    // them zero. nullptr: static round robin.
    int32_t* schedule = nullptr;
    int32_t* down_schedule = nullptr;  // gate-up only: the down kernel's schedule words, zeroed by CTA 0
    // MoeCudaOptions::trace: this kernel's [kMoeTraceMaxCtas][kMoeTraceSlots] block, or nullptr.
    uint64_t* trace = nullptr;
    int top_k = 0;
    const int32_t* topk_ids = nullptr;  // [fused_entries]
    struct RoutingOut {                 // written by the gate-up kernel's CTA 0 when fused_entries > 0
        int32_t* expert_count = nullptr;
        int32_t* slot_offset = nullptr;
        int32_t* tile_offset = nullptr;
        int32_t* entry_slot = nullptr;
        int32_t* slot_token = nullptr;
    } routing_out;
    // Small batches (MoeCudaOptions::fused_combine_entries): the down kernel also does the combine stage. Each
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

// Most routing entries (T * top_k) for which the GEMM kernels compute the routing themselves.
inline constexpr int kFusedRoutingEntries = 256;
// Most routing entries for which the down kernel may do the combine (GroupedGemmArgs::combine; the default of
// MoeCudaOptions::fused_combine_entries is lower).
inline constexpr int kFusedCombineEntries = 256;

// Static shape of a tile configuration.
struct TileShape {
    int consumers;     // consumer warpgroups (1 or 2)
    int m_blocks;      // blocks of 64 weight rows per consumer (one accumulator each)
    int block_tokens;  // most tokens of one item
    int stages;        // pipeline depth
    // Token tiles by TMA from rows in slot order (x_sorted for gate-up, h for down; always full boxes), instead
    // of 16-byte cp.async gathers by the producer warpgroup.
    bool tma_tokens;
    // CTAs per cluster (1 or 2; 2 needs tma_tokens). A pair works on adjacent weight tiles of one expert and
    // token tile, and each CTA loads half of the token boxes for both (TMA multicast): token bytes through L2
    // are halved (which did not make the layer faster: docs/cuda-moe-notes.md, v8).
    int cluster;
    // Pipeline depth of the gate-up kernel when it differs (0: stages). The tiny shape's gate-up CTAs stream their
    // items from the start while the down kernel's CTAs beside them only fill their pipelines and wait, so the
    // gate-up kernel gets the deeper pipeline.
    int gate_up_stages = 0;
};
// NOTE: the .cu file of each configuration instantiates its kernels from these constants.
inline constexpr TileShape kTiny8Shape{1, 1, 8, 5, false, 1, 6};
inline constexpr TileShape kSmall16Shape{1, 1, 16, 10, false, 1};
inline constexpr TileShape kSmall32Shape{1, 1, 32, 8, false, 1};
inline constexpr TileShape kSmall64Shape{1, 1, 64, 6, false, 1};
inline constexpr TileShape kSmall128Shape{1, 1, 128, 4, false, 1};
inline constexpr TileShape kWide128Shape{2, 1, 128, 6, true, 1};
inline constexpr TileShape kWide256Shape{2, 1, 256, 4, true, 1};
// 288-token tiles: at T = 4096 (256 +- 16 tokens per expert) nearly every expert streams its weights once, where
// 256-token tiles read about half of the experts' weights twice. 144 accumulators per consumer thread: the
// consumers take registers from the producer (Layout::kRebalanceRegs).
inline constexpr TileShape kWide288Shape{2, 1, 288, 4, true, 1};
inline constexpr TileShape kWide256GatherShape{2, 1, 256, 4, false, 1};
inline constexpr TileShape kTall128Shape{2, 2, 128, 4, true, 1};
// tall128's tile with its token rows copied by cp.async straight from x (through slot_token) and from h: no gather
// and no x_sorted. The one cp.async shape that also takes the dynamic schedule, the down kernel per expert and the
// combine by part (isTall128Gather below, Layout::kTall128Gather).
inline constexpr TileShape kTall128GatherShape{2, 2, 128, 4, false, 1};
inline constexpr TileShape kWide128PairShape{2, 1, 128, 6, true, 2};
inline constexpr TileShape kWide256PairShape{2, 1, 256, 4, true, 2};
TileShape tileShape(MoeTileConfig config);

// Whether a shape is kTall128GatherShape's: its cp.async producer takes items from the item ring and counts finished
// items (Layout::kTall128Gather has the same rule on the device side).
constexpr bool isTall128Gather(const TileShape& s) {
    return !s.tma_tokens && s.consumers == 2 && s.m_blocks == 2 && s.cluster == 1;
}
static_assert(isTall128Gather(kTall128GatherShape) && !isTall128Gather(kWide256GatherShape));

// Tokens of each tile of an expert that needs more than one (moe_token_tiles.cuh): shapes with tiles over 256 tokens
// hold a whole expert of up to block_tokens tokens in one tile and split larger ones into tiles of 256 (whose full
// tiles run one n256 wgmma per k-step, not a composite 256 + 32); the other shapes' tiles are all block_tokens.
__host__ __device__ constexpr int multiTileTokens(int block_tokens) { return block_tokens > 256 ? 256 : block_tokens; }

// Output columns one item covers: gate-up 32 per 64-row block (intermediate columns), down 64 per block. A
// cluster's items together cover `cluster` times as many.
inline int gateUpColumnsPerItem(const TileShape& s) { return 32 * s.consumers * s.m_blocks; }
inline int downRowsPerItem(const TileShape& s) { return 64 * s.consumers * s.m_blocks; }

// Launches the persistent gate-up (gate_up) or down kernel of a configuration on `stream` (one .cu file each);
// returns the launch status. `tmap_a` describes the packed weights (moePackWeightsCuda) as the 5-D view (k, row,
// k-block, 64-row unit, expert) with box {64, 64, 1, blocks, 1} (blocks = consumers * m_blocks). `tmap_b` (tma_tokens
// shapes only) describes b_src as [rows, b_ld] with box {64, tokenBoxRows}, `tmap_b_full` the same with box {64,
// block_tokens / cluster} (tiles up to 256 tokens) (one box per CTA of the cluster for items that fill the tile). All
// bf16 with the 128-byte swizzle. `sm_count` sizes the persistent grid.
#define AFD_DECLARE_GROUPED_GEMM(name)                                                                             \
    cudaError_t launchGroupedGemm##name(bool gate_up, const CUtensorMap& tmap_a, const CUtensorMap& tmap_b,        \
                                        const CUtensorMap& tmap_b_full, const GroupedGemmArgs& args, int sm_count, \
                                        cudaStream_t stream, bool programmatic)
AFD_DECLARE_GROUPED_GEMM(Tiny8);
AFD_DECLARE_GROUPED_GEMM(Small16);
AFD_DECLARE_GROUPED_GEMM(Small32);
AFD_DECLARE_GROUPED_GEMM(Small64);
AFD_DECLARE_GROUPED_GEMM(Small128);
AFD_DECLARE_GROUPED_GEMM(Wide128);
AFD_DECLARE_GROUPED_GEMM(Wide256);
AFD_DECLARE_GROUPED_GEMM(Wide288);
AFD_DECLARE_GROUPED_GEMM(Wide256Gather);
AFD_DECLARE_GROUPED_GEMM(Tall128);
AFD_DECLARE_GROUPED_GEMM(Tall128Gather);
AFD_DECLARE_GROUPED_GEMM(Wide128Pair);
AFD_DECLARE_GROUPED_GEMM(Wide256Pair);
#undef AFD_DECLARE_GROUPED_GEMM

}  // namespace afd::kernels::cuda
