// How the CUDA MoE layer (moe_cuda.h) runs a batch: the tile configurations of its grouped GEMMs (one table) and the
// planner that picks one and the paths around it from the layer's shape and the routing entries this rank serves.
// Host-only (no CUDA headers): the planner's rules are tested without a GPU (tests/kernels/moe_cuda_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe.h"

namespace afd::kernels {

// The tile configurations the planner can choose (kAuto: let it choose). The launcher of each is
// cuda::launchGroupedGemm<config> (kernels/cuda/moe_grouped_gemm.h), instantiated by its own .cu file.
enum class MoeTileConfig {
    kAuto,
    kTiny8,
    kSmall16,
    kSmall64,
    kSmall128,
    kWide128,
    kWide256,
    kWide288,
    kTall128,
    kTall128Gather
};

// Static shape of a tile configuration's gate-up and down kernels.
struct MoeTileShape {
    int consumers;     // consumer warpgroups (1 or 2)
    int m_blocks;      // blocks of 64 weight rows per consumer (one accumulator each)
    int block_tokens;  // most tokens of one work item (a tile of one expert's tokens)
    int stages;        // shared-memory pipeline depth
    // Token tiles by TMA from rows in slot order (x_sorted for gate-up, h for down; always full boxes), instead of
    // 16-byte cp.async gathers by the producer warpgroup.
    bool tma_tokens;
    // Pipeline depth of the gate-up kernel when it differs (0: stages). tiny8's gate-up CTAs stream their items from
    // the start while the down kernel's CTAs beside them only fill their pipelines and wait, so the gate-up kernel
    // gets the deeper pipeline.
    int gate_up_stages = 0;
};

struct MoeTile {
    MoeTileConfig config;
    const char* name;  // parseMoeTileConfig / moeTileConfigName, `afd bench moe --tiles`
    MoeTileShape shape;
};

// THE table of tile configurations: dispatch, the planner's choices, the names and the tests all come from it.
//   tiny8     8-token tiles (9 KB stages), up to four CTAs per SM, so that the down kernel's CTAs of a one- or
//             two-token step are resident beside the gate-up kernel's and start as soon as it ends
//   small16 … small128  one consumer warpgroup, items of 64 weight rows x up to N tokens, two CTAs per SM, token rows
//             gathered by cp.async (the memory-bound batches)
//   wide128, wide256  two consumers, items of 128 weight rows x up to N tokens, one CTA per SM, token tiles by TMA
//             from rows in slot order (the compute-bound batches)
//   wide288   the wide tile holding a whole expert of up to 288 tokens (larger ones in tiles of 256), so that at 256
//             +- 16 tokens per expert each expert streams its weights once; its consumers take registers from the
//             producer (144 accumulators per thread)
//   tall128   two consumers of two 64-row blocks each: items of 256 weight rows x up to 128 tokens by TMA, so each
//             token tile is re-read half as often as with wide128
//   tall128g  tall128's tile with its token rows copied by cp.async straight from x and h (no gather, no x_sorted),
//             its producer threads taking items from the item ring as the TMA shapes do
inline constexpr MoeTile kMoeTiles[] = {
    {MoeTileConfig::kTiny8, "tiny8", {1, 1, 8, 5, false, 6}},
    {MoeTileConfig::kSmall16, "small16", {1, 1, 16, 10, false}},
    {MoeTileConfig::kSmall64, "small64", {1, 1, 64, 6, false}},
    {MoeTileConfig::kSmall128, "small128", {1, 1, 128, 4, false}},
    {MoeTileConfig::kWide128, "wide128", {2, 1, 128, 6, true}},
    {MoeTileConfig::kWide256, "wide256", {2, 1, 256, 4, true}},
    {MoeTileConfig::kWide288, "wide288", {2, 1, 288, 4, true}},
    {MoeTileConfig::kTall128, "tall128", {2, 2, 128, 4, true}},
    {MoeTileConfig::kTall128Gather, "tall128g", {2, 2, 128, 4, false}},
};
inline constexpr size_t kMoeTileCount = sizeof(kMoeTiles) / sizeof(kMoeTiles[0]);

// The rows are in the enum's order, each configuration once: row i is configuration i + 1.
constexpr bool moeTilesInEnumOrder() {
    for (size_t i = 0; i < kMoeTileCount; ++i) {
        if (static_cast<size_t>(kMoeTiles[i].config) != i + 1) {
            return false;
        }
    }
    return static_cast<size_t>(MoeTileConfig::kTall128Gather) == kMoeTileCount;
}
static_assert(moeTilesInEnumOrder(), "kMoeTiles lists every MoeTileConfig but kAuto once, in the enum's order");

[[noreturn]] void throwNoMoeTile(MoeTileConfig config);  // core::Error: kAuto (or a value outside the enum) has no row

// The table row of a configuration (not kAuto).
constexpr const MoeTile& moeTile(MoeTileConfig config) {
    const size_t row = static_cast<size_t>(config) - 1;
    if (row >= kMoeTileCount) {
        throwNoMoeTile(config);
    }
    return kMoeTiles[row];
}
constexpr MoeTileShape moeTileShape(MoeTileConfig config) { return moeTile(config).shape; }

// Parses "auto" or a table name; returns false for anything else.
bool parseMoeTileConfig(const char* text, MoeTileConfig* config);
const char* moeTileConfigName(MoeTileConfig config);  // "auto" or the table name

// Output columns one item covers: gate-up 32 intermediate columns per 64-row block (gate and up rows interleaved),
// down 64 hidden rows per block.
constexpr int gateUpColumnsPerItem(const MoeTileShape& s) { return 32 * s.consumers * s.m_blocks; }
constexpr int downRowsPerItem(const MoeTileShape& s) { return 64 * s.consumers * s.m_blocks; }
// Tokens of each tile of an expert that needs more than one: shapes with tiles over 256 tokens hold a whole expert of
// up to block_tokens tokens in one tile and split larger ones into tiles of 256 (whose full tiles run one n256 wgmma
// per k-step, not a composite 256 + 32); the other shapes' tiles are all block_tokens.
constexpr int multiTileTokens(int block_tokens) { return block_tokens > 256 ? 256 : block_tokens; }
// tall128g's shape: its cp.async producer takes items from the item ring and counts finished items.
constexpr bool isTall128Gather(const MoeTileShape& s) { return !s.tma_tokens && s.consumers == 2 && s.m_blocks == 2; }
// Whether a configuration's weight tiles divide the layer (inter by gate-up columns, hidden by down rows per item).
bool moeTileFits(MoeTileConfig config, int64_t hidden, int64_t inter);

// Limits of the kernels, which the planner's rules and the CUDA code share.
inline constexpr int kMoeMaxExperts = 1024;               // the permute stage scans one expert per thread
inline constexpr int kMoeFusedRoutingEntries = 256;       // most entries for which the GEMM kernels route themselves
inline constexpr int kMoeFusedCombineEntries = 8;         // most entries for which the down kernel combines
inline constexpr int kMoeMaxCombineParts = 32;            // most blocks of hidden rows of the combine by part
inline constexpr int kMoeSingleCtaPermuteEntries = 2048;  // up to this many entries the permute stage is one CTA
inline constexpr int kMoePermuteChunkEntries = 1024;      // beyond, two kernels over chunks of this many entries
// Chunks of the two-kernel permute path for num_entries (0: one CTA).
constexpr int moePermuteChunks(int64_t num_entries) {
    return num_entries <= kMoeSingleCtaPermuteEntries
               ? 0
               : static_cast<int>((num_entries + kMoePermuteChunkEntries - 1) / kMoePermuteChunkEntries);
}

// How moeForwardCuda runs a batch: the tile and the path of each stage. Made by planMoeCuda (or
// withStagesReplayableAlone); other combinations of the fields are not supported.
struct MoeCudaPlan {
    MoeTileConfig tile = MoeTileConfig::kAuto;  // never kAuto in a made plan
    // Up to kMoeFusedRoutingEntries entries with a cp.async tile: the GEMM kernels compute the routing themselves and
    // no permute kernel runs (the gate-up kernel still writes the permute outputs).
    bool fused_routing = false;
    // Up to kMoeFusedCombineEntries entries: the down kernel also combines (the arrival that completes each block of
    // hidden rows sums it) and no combine kernel runs. Each arrival stalls its consumer for an acquire-release atomic,
    // which pays only while a down CTA has about one item.
    bool fused_combine = false;
    // The token-TMA tiles, and tall128g after the permute kernel: each CTA takes its first item statically and the
    // next ones from a device-wide counter as it finishes, so CTAs that drew short items (an expert's last, partly
    // filled token tile) take more.
    bool dynamic_schedule = false;
    // The token-TMA tiles copy x into slot order (x_sorted) and count each expert's rows as they complete, so that
    // each gate-up item waits only for its own expert's rows: wide128 by the gather kernel beside its gate-up kernel
    // (whose CTAs stream their first weights meanwhile), the others in their gate-up kernel's idle producer warps.
    bool gather_kernel = false;
    bool gather_in_gate_up = false;
    // Up to kDownPerExpertEntries entries per expert (the memory-bound batches; beyond, measured 2-5 % slower), tiles
    // with the item ring, no fused combine: each down item waits only until every gate-up item of its expert has
    // stored its h rows, so the down CTAs that take the SMs of finished gate-up CTAs stream while the gate-up
    // kernel's last items run. The down stage then needs the gate-up stage of the same layer before it.
    bool down_per_expert = false;
    // With down_per_expert, up to kCombineByPartEntries entries per expert: the down items go weight-tile-major and
    // are counted per block of hidden rows, and the combine sums each block once complete, on the SMs the down CTAs
    // leave; 0: expert-major down items, the combine after the down grid. At twice as many entries per expert the
    // weight-tile-major order reads each h tile once per block, far apart, and was 3-4 % slower.
    int combine_parts = 0;
    // A gate-up kernel that gathers its own rows after the two-kernel permute launches at the scatter kernel's start
    // and waits for two words it counts (its offsets written; every slot written) instead of its grid, so that its
    // setup and first weight copies overlap the scatter.
    bool gate_up_on_permute_words = false;
    // Each weight tile is read by about one item (entries per expert within one token tile): the weights stream with
    // evict_first; false: several token tiles re-read each weight tile, evict normally.
    bool weights_read_once = false;
    // With weights_read_once, the tiles over 128 tokens and tall128(g): the items of an expert with several token
    // tiles copy its weights with evict_last, so that its other tiles' items, taken at about the same time, find them
    // in L2. The small tiles and wide128 keep evict_first (1 % slower at T = 1024 zipf with the per-item policy).
    bool weights_shared_per_item = false;
    // Up to kReleaseEarlyEntries entries per expert: each consumer hands a stage back as soon as its wgmma retire
    // instead of after issuing the next stage's (one more stage in flight; consecutive stages' wgmma no longer
    // overlap): faster while the layer is memory-bound, slower beyond.
    bool release_early = false;
    // Beyond kNoDownPrefetchEntries entries the down kernel's CTAs issue their first weight copies before they wait
    // for the gate-up kernel. Below, its copies would share DRAM with the gate-up kernel's, whose end is the critical
    // path (T = 1: 29.3 against 30.9 us without the prefetch; at T = 2 the prefetch gains).
    bool down_prefetch = false;
};

inline constexpr int64_t kDownPerExpertEntries = 128;  // mean entries per expert (MoeCudaPlan::down_per_expert)
inline constexpr int64_t kCombineByPartEntries = 64;   // mean entries per expert (MoeCudaPlan::combine_parts)
inline constexpr int64_t kReleaseEarlyEntries = 64;    // mean entries per expert (MoeCudaPlan::release_early)
inline constexpr int64_t kNoDownPrefetchEntries = 8;   // entries (MoeCudaPlan::down_prefetch)

// The routing entries this rank expects to serve: T K num_experts / routed_experts of the T K entries (an FFN rank
// among R sees every entry but serves about one in R), all of them with one rank. What the choices by entries per
// expert measure. Throws core::Error when routed_experts is neither 0 nor >= num_experts.
int64_t moeServedEntries(const MoeParams& params);

// The plan for `params` (only its shape fields are read: T, H, I, E, K, routed_experts). tile kAuto: the planner's
// choice; another tile: that tile, which must fit the layer (moeTileFits). Throws core::Error on a shape the kernels
// do not take (hidden % 64, inter % 32, 1 <= num_experts <= kMoeMaxExperts, top_k >= 1, num_tokens >= 0).
MoeCudaPlan planMoeCuda(const MoeParams& params, MoeTileConfig tile = MoeTileConfig::kAuto);

// The plan with each stage replayable alone (the lab times them so): the down kernel waits for the whole gate-up grid
// and the combine for the whole down grid.
MoeCudaPlan withStagesReplayableAlone(MoeCudaPlan plan);

}  // namespace afd::kernels
