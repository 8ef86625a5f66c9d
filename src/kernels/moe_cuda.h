// CUDA (Hopper, sm_90a) implementation of the routed-expert MoE (moe.h) and the router (router.h).
// Includable by g++: no CUDA headers; streams are passed as `void*` (a cudaStream_t, nullptr = default stream).
//
// The layer runs as four stages on one stream, with no host synchronisation and no allocation, so a whole layer
// can be captured in a CUDA graph:
//   permute   counts the entries per expert, scans them into slot offsets and m-tile offsets, and lists the
//             token of every slot (slots are the routing entries grouped by expert, expert-major)
//   gate-up   grouped GEMM h[slot] = silu(Wg[e] x[token]) * (Wu[e] x[token])            (SwiGLU fused);
//             the wide tile shapes first copy x into slot order (x_sorted) so token tiles come by TMA
//   down      grouped GEMM y[slot] = W2[e] h[slot]
//   combine   out[t] = sum over t's local entries of topk_weight * y[slot]                 (fp32 sum, bf16 out)
// The grouped GEMMs are persistent kernels over (expert, weight-row tile, token tile) work items read from the
// device-side offsets; weights stream through TMA into a multi-stage shared-memory pipeline consumed by wgmma.
// The weights MoeParams::w13 and w2 point at are in the packed layout of moePackWeightsCuda, not row-major as moe.h
// describes them for the CPU layer.
//
// Requirements (checked, AFD_CHECK): act_dtype kBf16; hidden % 64 == 0; inter % 32 == 0; 1 <= top_k;
// 1 <= num_experts <= 1024; all pointers device pointers, 16-byte aligned. Ids outside [-1, num_experts) are
// treated as -1 (the caller validates routing).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe.h"
#include "kernels/router.h"

namespace afd::kernels {

// Tile shape of the grouped GEMMs. kSmallN: one consumer warpgroup, items of 64 weight rows x up to N tokens, two CTAs
// per SM, token tiles gathered by cp.async (memory-bound regime). kTiny8: 8-token tiles (9 KB stages), 5 stages (6 in
// the gate-up kernel), up to four CTAs per SM, so that the down kernel's CTAs of a one- or two-token step are resident
// beside the gate-up kernel's and start as soon as it ends. kWideN: two consumer warpgroups, items of 128 weight rows x
// up to N tokens, one CTA per SM, token tiles by TMA from rows in slot order (compute-bound regime); kWide288 holds a
// whole expert of up to 288 tokens in one tile (larger ones in tiles of 256), so at T = 4096 (256 +- 16 tokens per
// expert) each expert streams its weights once, its consumers taking registers from the producer; kWide256Gather:
// the wide tile with cp.async gathers. kTall128: two consumers with two 64-row blocks each, items of 256 weight rows x
// up to 128 tokens (token tiles by TMA), so each token tile is re-read half as often as with kWide128; kTall128Gather:
// tall128's tile with its token rows copied by cp.async straight from x and h (no gather, no x_sorted). kWide128Pair /
// kWide256Pair: the wide tiles in clusters of two CTAs on adjacent weight tiles of one expert that load each token tile
// once for both (TMA multicast), which halves the token bytes read through L2; they need inter % (64 * 2) == 0 and
// hidden % (128 * 2) == 0. kAuto picks from the routing entries T * top_k per expert: where the 256-row tile divides
// the layer, kTall128 from half an entry per expert and kTall128Gather from 10 to 24 (docs/cuda-moe-notes.md v27),
// else the small and wide shapes; never a pair shape (they measured the same as the single-CTA wide shapes).
enum class MoeTileConfig {
    kAuto,
    kTiny8,
    kSmall16,
    kSmall32,
    kSmall64,
    kSmall128,
    kWide128,
    kWide256,
    kWide288,
    kWide256Gather,
    kTall128,
    kTall128Gather,
    kWide128Pair,
    kWide256Pair
};

// Parses "auto", "tiny8", "small16" … "wide256", "wide288", "wide256g", "tall128", "tall128g", "wide128pair",
// "wide256pair";
// returns false for anything else.
bool parseMoeTileConfig(const char* text, MoeTileConfig* config);
const char* moeTileConfigName(MoeTileConfig config);

// MoeCudaOptions::combine_by_part's reach: routing entries per expert on average.
inline constexpr int64_t kCombineByPartEntriesPerExpert = 64;

struct MoeCudaOptions {
    MoeTileConfig tile = MoeTileConfig::kAuto;
    // Launch gate-up, down and combine with programmatic dependent launch, so each kernel's prologue (and the
    // down kernel's first weight loads) overlaps the previous kernel's tail.
    bool programmatic_launch = true;
    // With at most 256 routing entries (and a cp.async tile shape) the GEMM kernels compute the routing
    // themselves and moePermuteCuda launches nothing; the gate-up kernel still writes the permute outputs.
    bool fuse_small_routing = true;
    // With at most this many routing entries (capped at 256; 0: never) the down kernel also does the combine stage
    // (the arrival that completes each block of hidden rows sums it) and moeCombineCuda launches nothing. Each
    // arrival stalls its consumer for an acquire-release atomic, so this pays only while a down CTA has about one item
    // (docs/cuda-moe-notes.md, v8).
    int fused_combine_entries = 8;
    // Tile shapes with token tiles by TMA (the wide, tall and pair shapes): each CTA (pair) takes its first work item
    // statically and the next ones from a device-wide counter as it finishes, so CTAs that drew short items (an
    // expert's last, partly filled token tile) take more; false: the static round robin blockIdx.x + i * gridDim.x.
    bool dynamic_schedule = true;
    // Up to early_release_entries_per_expert routing entries per expert: each consumer hands a stage back to the
    // producer as soon as its wgmma retire instead of after issuing the next stage's, so one more stage is in flight;
    // the wgmma of consecutive stages no longer overlap. Measured: wide128 1 % faster at 64 entries per expert, 2-3 %
    // slower at 96 with zipf routing and 10 % slower at 256; wide288 within the run-to-run spread at 128 and 256
    // (docs/cuda-moe-notes.md, v15).
    bool early_stage_release = true;
    int early_release_entries_per_expert = 64;
    // Beyond 8 routing entries, the down kernel's CTAs issue their first weight copies before they wait for the
    // gate-up kernel (false: never).
    bool down_prefetch = true;
    // The 128-token TMA tile (wide128): the gate-up kernel's CTAs, resident beside the gather kernel's, issue their
    // first weight copies before they wait for it (false: they wait first).
    bool gate_up_prefetch = true;
    // Token-TMA shapes: x_sorted is written in slot order and each expert's rows are counted as they complete; each
    // gate-up item waits for its own expert's rows instead of the whole gather. wide128 with gate_up_prefetch runs the
    // gather kernel beside its gate-up kernel; the others gather in the gate-up kernel's idle producer warps, so their
    // first items start while later rows are still being copied (false: the token-order gather kernel, waited for as a
    // whole).
    bool slot_gather = true;
    // Tile shapes over 128 tokens (wide256, wide288 and their pair) and tall128, when each weight tile is read about
    // once on average: the items of an expert with several token tiles (a hot expert under skewed routing, or about
    // half the experts at T K / E just over one tile) copy its weights with evict_last instead of evict_first, so that
    // its other tiles' items, taken at about the same time, find them in L2 (false: evict_first for every item).
    // tall128 with it: T = 2048 uniform 4 % faster, T = 1024 zipf about 3 % (docs/cuda-moe-notes.md v18, v20). wide128
    // keeps evict_first (T = 1024 with zipf routing measured 1 % slower with the per-item policy, v11).
    bool shared_weights_in_l2 = true;
    // Token-TMA shapes (no CTA pairs, no fused combine), up to 128 routing entries per expert (the memory-bound
    // batches; beyond, it measured 2-5 % slower): each down item waits only until every gate-up item of its expert has
    // stored its h rows, not for the whole gate-up kernel, so the down CTAs that take the SMs of finished gate-up CTAs
    // stream while the gate-up kernel's last items run. moeDownCuda then needs the moeGateUpCuda of the
    // same layer and options before it on the stream (false: the down kernel waits for the gate-up grid, and either
    // stage may be replayed alone).
    bool down_per_expert = true;
    // Gate-up kernels that gather their own token rows (the token-TMA shapes but wide128 with gate_up_prefetch), beyond
    // kSingleCtaPermuteEntries routing entries (two permute kernels): the permute's scatter kernel lets the gate-up
    // kernel launch at its start, and the gate-up CTAs wait for two words the scatter kernel counts with release (its
    // offsets written; every slot written) instead of its grid, so their setup and first weight copies overlap the
    // scatter (T = 1024 first stage 1.5-2 us sooner, docs/cuda-moe-notes.md v23). false: the gate-up kernel waits
    // for the scatter grid.
    bool gate_up_on_permute_words = true;
    // Where down_per_expert is in effect, up to kCombineByPartEntriesPerExpert routing entries per expert on average:
    // the down kernel's items go weight-tile-major over every expert (each block of hidden rows of y complete before
    // the next block's items start) and it counts each finished item per block; the combine sums each block as soon
    // as its count is complete, on the SMs the down CTAs leave while the last block's items run, instead of waiting for
    // the whole down grid. T = 1024 3 us faster with either routing; at 128 entries per expert (T = 2048) the
    // weight-tile-major order reads each h tile once per block, far apart, and was 3-4 % slower
    // (docs/cuda-moe-notes.md, v25). false: expert-major items, the combine after the down grid.
    bool combine_by_part = true;
    // Diagnostics (afd bench moe --timeline): when non-null, a zeroed device buffer of kMoeTraceWords words: each CTA
    // of the gate-up (block 0) and down (block 1) GEMM kernels writes %globaltimer stamps (ns) of the MoeTraceEvent
    // points, and its item count, into [2][kMoeTraceMaxCtas][kMoeTraceSlots]; the permute and combine kernels fold
    // theirs into the kMoeTraceLayerWords after (MoeTraceLayerWord).
    uint64_t* trace = nullptr;
};

// What each traced CTA records (MoeCudaOptions::trace); a zero time stamp means the CTA never got there.
enum MoeTraceEvent : int {
    kTraceEntry = 0,     // first instruction
    kTraceSetup,         // barriers, prefixes (or the fused routing) ready
    kTraceDependency,    // the producer has waited for the previous kernel (gate-up: in the prologue; beside the
                         // slot-order gather: issued its first weight copies, it waits per expert instead)
    kTraceFirstLoad,     // the producer issues its first copy
    kTraceFirstData,     // consumer warpgroup 0 has its first stage
    kTraceLastMma,       // consumer warpgroup 0 finished the MMAs of its last item
    kTraceEnd,           // consumer warpgroup 0 finished its last epilogue (and fused combine)
    kTraceProducerDone,  // the producer issued its last copy
    kTraceRowsReady,     // gate-up: the producer found its first item's token rows complete (slot-order gather)
    kTraceGatherFirst,   // gate-up: the CTA's first gathering warp counted its first group of rows
    kTraceItems,         // items consumed (a count, not a time)
    kTraceWaited,  // token-TMA shapes: ns the producer waited in all for its experts' token rows (gate-up: rows of
                   // x_sorted counted by the gather; down: h rows, GroupedGemmArgs::h_ready); a duration
    // Then the CTA's first kMoeTraceLoggedItems items, kMoeTraceItemWords words each: when consumer warpgroup 0
    // finished the item (its epilogue included), the item (expert | ntok << 16 | expert_tiles << 32), and the
    // weight bytes it streamed.
    kTraceItemLog,
};
inline constexpr int kMoeTraceLoggedItems = 16;
inline constexpr int kMoeTraceItemWords = 3;
inline constexpr int kMoeTraceSlots = kTraceItemLog + kMoeTraceLoggedItems * kMoeTraceItemWords;
inline constexpr int kMoeTraceMaxCtas = 1024;

// The stamps of the layer's kernels beside the GEMMs (MoeCudaOptions::trace), after the GEMM kernels' blocks: every
// CTA folds its own in with atomicMax, an earliest time as its complement (~t), so that zero still means none.
enum MoeTraceLayerWord : int {
    kTraceLayerPermuteEntry = 0,  // ~ the first permute CTA's entry (no permute runs where the GEMMs route)
    kTraceLayerPermuteEnd,        // the last permute CTA's end
    kTraceLayerCombineEntry,      // ~ the first combine CTA's entry (none where the down kernel combines)
    kTraceLayerCombineStart,      // ~ the first combine CTA past its wait for the down kernel
    kTraceLayerCombineEnd,        // the last combine CTA's end
    kMoeTraceLayerWords = 8,
};
inline constexpr size_t kMoeTraceLayerOffset = size_t{2} * kMoeTraceMaxCtas * kMoeTraceSlots;  // the layer words' first
inline constexpr size_t kMoeTraceWords = kMoeTraceLayerOffset + kMoeTraceLayerWords;

// The tile configuration moeForwardCuda uses for these params and options (never kAuto).
MoeTileConfig resolveMoeTileConfig(const MoeParams& params, const MoeCudaOptions& options);

// Which of the MoeCudaOptions paths moeForwardCuda takes for these params (each option applies only where its shape
// and batch allow it): what the FFN rank and the benchmark run, and what the tests hold the rules to.
struct MoeCudaPlan {
    MoeTileConfig tile = MoeTileConfig::kAuto;  // resolveMoeTileConfig
    bool fused_routing = false;                 // the GEMM kernels route; no permute kernel
    bool fused_combine = false;                 // the down kernel combines; no combine kernel
    bool dynamic_schedule = false;
    bool slot_gather = false;
    bool gather_in_gate_up = false;         // the gate-up kernel gathers its own token rows
    bool down_per_expert = false;           // each down item waits only for its expert's gate-up items
    int combine_parts = 0;                  // the combine by part's blocks of hidden rows; 0: not by part
    bool gate_up_on_permute_words = false;  // the gate-up kernel starts on the scatter kernel's words
};
MoeCudaPlan planMoeCuda(const MoeParams& params, const MoeCudaOptions& options);

// The expert weights of one layer in the layout the grouped GEMMs stream (MoeParams::w13 and w2 of every function
// below): blocks of 64 weight rows x 64 reduction columns, each block 8 KB of contiguous memory, the blocks of one
// k-block unit after unit, so that a grouped GEMM stage is one run of memory (moe_pack_weights.cu has the index map).
// Row-major weights put each 128-byte row of a block at its own address, and streamed about 1 % slower at T = 1024 and
// 4096 (docs/cuda-moe-notes.md, v16); a stage in four 8 KB runs was 1-3 % slower at T = 1 ... 256 (v20). Sizes in bytes
// of the packed w13 and w2 (w2 pads the reduction length I up to a multiple of 64 with zeros).
struct MoePackedWeightBytes {
    size_t w13 = 0;
    size_t w2 = 0;
};
MoePackedWeightBytes moePackedWeightBytes(int64_t num_experts, int64_t hidden, int64_t inter);
// Packs row-major w13 [E, 2I, H] and w2 [E, H, I] (device memory) into w13_packed / w2_packed (device memory of
// moePackedWeightBytes) on `stream`; asynchronous. hidden % 64 == 0, inter % 32 == 0.
void moePackWeightsCuda(const core::Bf16* w13, const core::Bf16* w2, int64_t num_experts, int64_t hidden, int64_t inter,
                        core::Bf16* w13_packed, core::Bf16* w2_packed, void* stream);

// Bytes of device workspace moeForwardCuda needs for `num_tokens` tokens (size it with the largest T).
size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter);

// Typed views of the workspace (device pointers) after a run, for tests and benchmarks.
struct MoeWorkspaceView {
    int32_t* expert_count = nullptr;  // [E] routing entries per local expert
    int32_t* slot_offset = nullptr;   // [E + 1] first slot of each expert; slot_offset[E] = valid entries
    int32_t* tile_offset = nullptr;   // [E + 1] first token tile of each expert (tiles of the config's N tokens)
    int32_t* chunk_counts = nullptr;  // permute scratch (per-chunk expert counts when T * K > 2048)
    int32_t* entry_slot = nullptr;    // [T * K] slot of entry (t, j), -1 when not served here
    int32_t* slot_token = nullptr;    // [T * K] token of each slot (first slot_offset[E] valid)
    core::Bf16* x_sorted = nullptr;   // [T * K, H] x in slot order (wide tile shapes only)
    core::Bf16* h = nullptr;          // [T * K, I] SwiGLU activations per slot
    core::Bf16* y = nullptr;          // [T * K, H] expert outputs per slot (unweighted)
};
MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes);

// out = MoE(x) as in moe.h, on `stream`. Asynchronous; no host synchronisation, no allocation; capturable.
void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});

// The four stages of moeForwardCuda, each on `stream`, for the harness and stage timing; run in order with the
// same params, workspace and options. With fused small routing the permute outputs exist after moeGateUpCuda;
// with fused small combine the output exists after moeDownCuda.
void moePermuteCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});
void moeGateUpCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                   const MoeCudaOptions& options = {});
void moeDownCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                 const MoeCudaOptions& options = {});
void moeCombineCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options = {});

// Bytes of device workspace routerForwardCuda needs for `num_tokens` tokens (size it with the largest T): the partial
// logits of the reduction split over CTAs.
size_t routerCudaWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);

// Router as in router.h on `stream`: logits (fp32, tensor cores, fp32 accumulation), softmax, top-k (ties: lower
// expert id), optional renormalisation. Requires act_dtype kBf16, hidden % 16 == 0, num_experts % 32 == 0,
// num_experts <= 256, top_k <= num_experts and top_k <= 32, and a 16-byte aligned device workspace of
// routerCudaWorkspaceBytes. Two kernels, the second launched programmatically (PDL); asynchronous; capturable.
void routerForwardCuda(const RouterParams& params, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace afd::kernels
