// Host side of the CUDA MoE layer and router (moe_cuda.h): checks the params, lays out the workspace, encodes the
// weight tensor maps, picks the tile configuration and launches the four stages on the caller's stream.
#include "kernels/moe_cuda.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_stages.h"

namespace afd::kernels {
namespace {

using cuda::GroupedGemmArgs;
using cuda::TileShape;

constexpr size_t kAlign = 256;

size_t alignUp(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

struct WorkspaceLayout {
    size_t expert_count = 0;
    size_t slot_offset = 0;
    size_t tile_offset = 0;
    size_t chunk_counts = 0;
    size_t combine_counters = 0;
    // [syncWords(E)]: the dynamic scheduling words (gate-up, then down), then the slot-order gather's counts [E] and
    // the gate-up CTAs done reading them [1] (GroupedGemmArgs::gathered, gathered_exit), then the gate-up items done
    // per expert [E] and the down CTAs done reading them [1] (GroupedGemmArgs::h_ready, h_ready_exit), then the down
    // items done per part [kMaxCombineParts] (GroupedGemmArgs::part_done)
    size_t schedule = 0;
    size_t permute_ready = 0;  // [2] launchMoePermute's ready_words (GroupedGemmArgs::permute_ready)
    size_t entry_slot = 0;
    size_t slot_token = 0;
    size_t x_sorted = 0;
    size_t h = 0;
    size_t y = 0;
    size_t total = 0;
};

// Most routing entries per expert (mean) for which the down kernel starts per expert (MoeCudaOptions::down_per_expert).
constexpr int64_t kDownPerExpertEntries = 128;

// Words of the workspace's schedule region (WorkspaceLayout::schedule), all zeroed by the permute stage.
int64_t syncWords(int64_t experts) { return 2 * cuda::kScheduleWords + 2 * (experts + 1) + cuda::kMaxCombineParts; }

WorkspaceLayout workspaceLayout(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter) {
    const size_t entries = static_cast<size_t>(tokens * top_k);
    WorkspaceLayout l;
    size_t at = 0;
    l.expert_count = at;
    at = alignUp(at + static_cast<size_t>(experts) * 4);
    l.slot_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.tile_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.chunk_counts = at;
    at = alignUp(at + static_cast<size_t>(cuda::permuteChunks(static_cast<int>(entries))) * experts * 4);
    l.combine_counters = at;
    at = alignUp(at + static_cast<size_t>(hidden / 64) * 4);
    l.schedule = at;
    at = alignUp(at + static_cast<size_t>(syncWords(experts)) * 4);
    l.permute_ready = at;
    at = alignUp(at + 2 * 4);
    l.entry_slot = at;
    at = alignUp(at + entries * 4);
    l.slot_token = at;
    at = alignUp(at + entries * 4);
    l.x_sorted = at;
    at = alignUp(at + entries * static_cast<size_t>(hidden) * 2);
    l.h = at;
    at = alignUp(at + entries * static_cast<size_t>(inter) * 2);
    l.y = at;
    at = alignUp(at + entries * static_cast<size_t>(hidden) * 2);
    l.total = at;
    return l;
}

void checkMoeParams(const MoeParams& p) {
    AFD_CHECK(p.act_dtype == ActDType::kBf16, "moeForwardCuda: act_dtype must be kBf16");
    AFD_CHECK(p.num_tokens >= 0, "moeForwardCuda: num_tokens {} < 0", p.num_tokens);
    AFD_CHECK(p.hidden > 0 && p.hidden % 64 == 0, "moeForwardCuda: hidden {} must be a positive multiple of 64",
              p.hidden);
    AFD_CHECK(p.inter > 0 && p.inter % 32 == 0, "moeForwardCuda: inter {} must be a positive multiple of 32", p.inter);
    AFD_CHECK(p.top_k >= 1, "moeForwardCuda: top_k {} < 1", p.top_k);
    AFD_CHECK(p.num_experts >= 1 && p.num_experts <= cuda::kMaxPermuteExperts,
              "moeForwardCuda: num_experts {} outside [1, {}]", p.num_experts, cuda::kMaxPermuteExperts);
    // NOTE: the kernels index rows of x, x_sorted, h and y with 32-bit element offsets.
    AFD_CHECK(p.num_tokens * p.top_k * std::max(p.hidden, p.inter) < (int64_t{1} << 31),
              "moeForwardCuda: T * top_k * max(hidden, inter) = {} does not fit 32-bit offsets",
              p.num_tokens * p.top_k * std::max(p.hidden, p.inter));
    if (p.num_tokens > 0) {
        AFD_CHECK(p.x && p.topk_ids && p.topk_weights && p.w13 && p.w2 && p.out,
                  "moeForwardCuda: null device pointer in params");
    }
}

// Up to this many routing entries (one token at top-8) the down kernel issues no weight copy before the gate-up
// kernel has finished: its copies would share DRAM with the gate-up kernel's, whose end is the critical path, and
// measured 29.3 against 30.9 us at T = 1; at T = 2 the prefetch gains (44.9 against 46.7 us).
constexpr int64_t kNoDownPrefetchEntries = 8;

// Up to this many routing entries kAuto takes kTiny8 (each CTA streams about one weight tile per kernel, so
// the down kernel's weights can stream beside the gate-up kernel's).
constexpr int64_t kTinyEntries = 16;
// Routing entries per expert (T * top_k / E, rounded down) for which kAuto takes kTall128Gather: [min, max).
constexpr int64_t kTallGatherMinMean = 10;
constexpr int64_t kTallGatherMaxMean = 24;

// The routing entries this rank expects to serve (MoeParams::routed_experts): what the choices by entries per expert
// (the tile, the down kernel per expert, the combine by part, the weights' L2 policy, the early release) measure, since
// an FFN rank among R sees every entry but serves about one in R.
int64_t servedEntries(const MoeParams& p) {
    AFD_CHECK(p.routed_experts == 0 || p.routed_experts >= p.num_experts,
              "MoE routed_experts {} is below num_experts {} (0 means num_experts)", p.routed_experts, p.num_experts);
    const int64_t entries = p.num_tokens * p.top_k;
    return p.routed_experts > p.num_experts ? entries * p.num_experts / p.routed_experts : entries;
}

bool shapeFits(const MoeParams& p, const TileShape& s) {
    return p.inter % (cuda::gateUpColumnsPerItem(s) * s.cluster) == 0 &&
           p.hidden % (cuda::downRowsPerItem(s) * s.cluster) == 0;
}

PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult query{};
        AFD_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query));
        AFD_CHECK(query == cudaDriverEntryPointSuccess && ptr != nullptr,
                  "cuTensorMapEncodeTiled is not available from the CUDA driver");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }();
    return fn;
}

// What a tensor map is over: the expert weights (packed, moePackWeightsCuda) stream from DRAM about once per layer;
// token rows (x_sorted, h) are read again by every weight tile of their expert.
enum class MapOf { kWeights, kTokens };

// L2 promotion of each TMA request: none for the weights, 256 bytes for the token rows. With row-major weights a
// 256-byte promotion of each 128-byte weight row request also fetched the row's next 128 bytes (the next stage's), and
// the layer measured 1-3 % slower at T = 8 ... 1024 and up to 1 % at 4096 (docs/bench-runs/v14-experiments.log,
// calls 12-13).
CUtensorMapL2promotion l2Promotion(MapOf of) {
    return of == MapOf::kWeights ? CU_TENSOR_MAP_L2_PROMOTION_NONE : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

CUtensorMap encodeTensorMap(const void* base, uint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides,
                            const cuuint32_t* box, CUresult* result, MapOf of) {
    CUtensorMap map;
    std::memset(&map, 0, sizeof(map));
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    *result = tensorMapEncoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides,
                                 box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 l2Promotion(of), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return map;
}

// Tensor map over a row-major bf16 matrix [rows, cols]: boxes of 64 columns x box_rows rows, 128-byte swizzle.
CUtensorMap matrixTensorMap(const void* base, int64_t rows, int64_t cols, uint32_t box_rows, MapOf of) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
    const cuuint32_t box[2] = {64, box_rows};
    CUresult result;
    const CUtensorMap map = encodeTensorMap(base, 2, dims, strides, box, &result, of);
    AFD_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed ({}) for a [{}, {}] bf16 matrix, box rows {}",
              static_cast<int>(result), rows, cols, box_rows);
    return map;
}

// The 5-D view (k, row, 64-row unit, k-block, expert) of packed weights (moePackWeightsCuda) whose box
// {64, 64, units, 1, 1} lands an item's `units` blocks of 64 rows for one k-block, one run of contiguous memory:
// shared-memory row 64 u + r is weight row r of the item's u-th unit (moe_gemm_producer.cuh).
CUtensorMap packedWeightMap(const core::Bf16* base, int64_t experts, int64_t units, int64_t k_blocks,
                            uint32_t box_units) {
    const cuuint64_t block = 64 * 64 * 2;
    const cuuint64_t dims[5] = {64, 64, static_cast<cuuint64_t>(units), static_cast<cuuint64_t>(k_blocks),
                                static_cast<cuuint64_t>(experts)};
    const cuuint64_t strides[4] = {128, block, static_cast<cuuint64_t>(units) * block,
                                   static_cast<cuuint64_t>(units * k_blocks) * block};
    const cuuint32_t box[5] = {64, 64, box_units, 1, 1};
    CUresult result;
    const CUtensorMap map = encodeTensorMap(base, 5, dims, strides, box, &result, MapOf::kWeights);
    AFD_CHECK(result == CUDA_SUCCESS,
              "cuTensorMapEncodeTiled failed ({}) for packed weights of {} experts x {} units x {} k-blocks",
              static_cast<int>(result), experts, units, k_blocks);
    return map;
}

// Rows of one token TMA box (moe_gemm_producer.cuh issues as many boxes as an item needs), and of the box each CTA
// of a cluster loads for an item that fills the tile.
// Tiles over 256 tokens load boxes of 96 rows only (Layout::kTokenBoxRows, kFullTokenBox).
uint32_t tokenBoxRows(const TileShape& s) {
    return static_cast<uint32_t>(s.block_tokens > 256 ? 96 : std::min(64, s.block_tokens));
}
uint32_t fullTokenBoxRows(const TileShape& s) {
    return s.block_tokens / s.cluster <= 256 ? static_cast<uint32_t>(s.block_tokens / s.cluster) : tokenBoxRows(s);
}

int smCount() {
    int device = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&device));
    int count = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
}

cudaError_t dispatchGroupedGemm(MoeTileConfig config, bool gate_up, const CUtensorMap& tmap, const CUtensorMap& tmap_b,
                                const CUtensorMap& tmap_b_full, const GroupedGemmArgs& args, cudaStream_t stream,
                                bool programmatic) {
    const int sms = smCount();
    switch (config) {
        case MoeTileConfig::kTiny8:
            return cuda::launchGroupedGemmTiny8(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall16:
            return cuda::launchGroupedGemmSmall16(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall32:
            return cuda::launchGroupedGemmSmall32(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall64:
            return cuda::launchGroupedGemmSmall64(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kSmall128:
            return cuda::launchGroupedGemmSmall128(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kWide128:
            return cuda::launchGroupedGemmWide128(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kWide256:
            return cuda::launchGroupedGemmWide256(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kWide288:
            return cuda::launchGroupedGemmWide288(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kWide256Gather:
            return cuda::launchGroupedGemmWide256Gather(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream,
                                                        programmatic);
        case MoeTileConfig::kTall128:
            return cuda::launchGroupedGemmTall128(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream, programmatic);
        case MoeTileConfig::kTall128Gather:
            return cuda::launchGroupedGemmTall128Gather(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream,
                                                        programmatic);
        case MoeTileConfig::kWide128Pair:
            return cuda::launchGroupedGemmWide128Pair(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream,
                                                      programmatic);
        case MoeTileConfig::kWide256Pair:
            return cuda::launchGroupedGemmWide256Pair(gate_up, tmap, tmap_b, tmap_b_full, args, sms, stream,
                                                      programmatic);
        case MoeTileConfig::kAuto:
            break;
    }
    return cudaErrorInvalidValue;
}

cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

struct Resolved {
    MoeTileConfig config;
    TileShape shape;
    MoeWorkspaceView view;
    bool fused_routing;  // the GEMM kernels compute the routing (moe_fused_routing.cuh)
    bool fused_combine;  // the down kernel does the combine (moe_fused_combine.cuh)
    bool dynamic;        // dynamic item scheduling (GroupedGemmArgs::schedule)
    bool slot_gather;    // x_sorted in slot order, counted per expert (MoeCudaOptions::slot_gather): by the gather
                         // kernel beside the gate-up kernel, or by the gate-up kernel itself (gather_in_gate_up)
    bool gather_in_gate_up;
    int32_t* h_ready;  // MoeCudaOptions::down_per_expert where the shape takes it, else null
    // MoeCudaOptions::gate_up_on_permute_words where it applies (a gate-up kernel that gathers its own rows after the
    // two-kernel permute), else null; and the scatter CTAs that count permute_ready[1]
    int32_t* permute_ready;
    int permute_ready_ctas;
    int32_t* combine_counters;
    int32_t* part_done = nullptr;  // GroupedGemmArgs::part_done: the combine by part, or null
    int parts = 0;                 // the down kernel's weight tiles (parts of the combine by part)
    int32_t* schedule;  // WorkspaceLayout::schedule: [2 * kScheduleWords] gate-up then down, gathered [E], exit [1],
                        // h_ready [E], exit [1]
};

Resolved prepare(const MoeParams& params, void* workspace, size_t workspace_bytes, const MoeCudaOptions& options) {
    const MoeCudaPlan plan = planMoeCuda(params, options);
    Resolved r;
    r.config = plan.tile;
    r.shape = cuda::tileShape(r.config);
    r.view = moeWorkspaceView(params, workspace, workspace_bytes);
    r.fused_routing = plan.fused_routing;
    r.fused_combine = plan.fused_combine;
    const WorkspaceLayout l =
        workspaceLayout(params.num_tokens, params.top_k, params.num_experts, params.hidden, params.inter);
    r.combine_counters = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(workspace) + l.combine_counters);
    r.dynamic = plan.dynamic_schedule;
    r.schedule = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(workspace) + l.schedule);
    r.slot_gather = plan.slot_gather;
    r.gather_in_gate_up = plan.gather_in_gate_up;
    r.h_ready = plan.down_per_expert ? r.schedule + 2 * cuda::kScheduleWords + params.num_experts + 1 : nullptr;
    r.parts = plan.combine_parts;
    r.part_done =
        plan.combine_parts > 0 ? r.schedule + 2 * cuda::kScheduleWords + 2 * (params.num_experts + 1) : nullptr;
    r.permute_ready_ctas = cuda::permuteChunks(static_cast<int>(params.num_tokens * params.top_k));
    r.permute_ready = plan.gate_up_on_permute_words
                          ? reinterpret_cast<int32_t*>(static_cast<uint8_t*>(workspace) + l.permute_ready)
                          : nullptr;
    return r;
}

// MoeCudaOptions::trace's words of the permute and combine kernels (MoeTraceLayerWord), or nullptr.
uint64_t* traceLayerWords(const MoeCudaOptions& options) {
    return options.trace != nullptr ? options.trace + kMoeTraceLayerOffset : nullptr;
}

GroupedGemmArgs commonArgs(const MoeParams& params, const Resolved& r, const MoeCudaOptions& options, bool gate_up) {
    GroupedGemmArgs args;
    args.slot_token = r.view.slot_token;
    args.slot_offset = r.view.slot_offset;
    args.tile_offset = r.view.tile_offset;
    args.num_experts = static_cast<int>(params.num_experts);
    const int64_t served = servedEntries(params);
    args.weights_read_once = served <= params.num_experts * static_cast<int64_t>(r.shape.block_tokens) ? 1 : 0;
    // Every shape but those of one 64-row block per consumer and at most 128 tokens (the small ones, wide128 and its
    // pair), whose batches are memory-bound (MoeCudaOptions::shared_weights_in_l2).
    args.weights_shared_per_item =
        options.shared_weights_in_l2 && (r.shape.block_tokens > 128 || r.shape.m_blocks > 1) ? 1 : 0;
    args.top_k = static_cast<int>(params.top_k);
    const bool few_entries =
        served <= static_cast<int64_t>(options.early_release_entries_per_expert) * params.num_experts;
    args.release_early = options.early_stage_release && few_entries ? 1 : 0;
    args.max_token_tiles = static_cast<int>(params.num_tokens * params.top_k);
    if (r.fused_routing) {
        args.fused_entries = static_cast<int>(params.num_tokens * params.top_k);
        args.topk_ids = params.topk_ids;
    }
    if (r.dynamic) {
        // The permute kernel zeroes the gate-up kernel's words, the gate-up kernel the down kernel's.
        args.schedule = r.schedule + (gate_up ? 0 : cuda::kScheduleWords);
        args.down_schedule = gate_up ? r.schedule + cuda::kScheduleWords : nullptr;
    }
    if (options.trace != nullptr) {
        args.trace = options.trace + (gate_up ? 0 : kMoeTraceMaxCtas * kMoeTraceSlots);
    }
    if (r.h_ready != nullptr) {
        args.h_ready = r.h_ready;
        args.h_ready_exit = gate_up ? nullptr : r.h_ready + params.num_experts;
        args.h_ready_items_per_tile = static_cast<int>(params.inter / cuda::gateUpColumnsPerItem(r.shape));
    }
    if (r.fused_combine) {
        // The gate-up kernel zeroes the counters, the down kernel combines into out.
        args.combine.counters = r.combine_counters;
        args.combine.num_counters = static_cast<int>(params.hidden / 64);
        args.combine.num_tokens = static_cast<int>(params.num_tokens);
    }
    return args;
}

}  // namespace

namespace cuda {

TileShape tileShape(MoeTileConfig config) {
    switch (config) {
        case MoeTileConfig::kTiny8:
            return kTiny8Shape;
        case MoeTileConfig::kSmall16:
            return kSmall16Shape;
        case MoeTileConfig::kSmall32:
            return kSmall32Shape;
        case MoeTileConfig::kSmall64:
            return kSmall64Shape;
        case MoeTileConfig::kSmall128:
            return kSmall128Shape;
        case MoeTileConfig::kWide128:
            return kWide128Shape;
        case MoeTileConfig::kWide256:
            return kWide256Shape;
        case MoeTileConfig::kWide288:
            return kWide288Shape;
        case MoeTileConfig::kWide256Gather:
            return kWide256GatherShape;
        case MoeTileConfig::kTall128:
            return kTall128Shape;
        case MoeTileConfig::kTall128Gather:
            return kTall128GatherShape;
        case MoeTileConfig::kWide128Pair:
            return kWide128PairShape;
        case MoeTileConfig::kWide256Pair:
            return kWide256PairShape;
        case MoeTileConfig::kAuto:
            break;
    }
    AFD_FAIL("tileShape: kAuto has no shape");
}

}  // namespace cuda

bool parseMoeTileConfig(const char* text, MoeTileConfig* config) {
    static constexpr MoeTileConfig kAll[] = {
        MoeTileConfig::kAuto,          MoeTileConfig::kTiny8,      MoeTileConfig::kSmall16,
        MoeTileConfig::kSmall32,       MoeTileConfig::kSmall64,    MoeTileConfig::kSmall128,
        MoeTileConfig::kWide128,       MoeTileConfig::kWide256,    MoeTileConfig::kWide288,
        MoeTileConfig::kWide256Gather, MoeTileConfig::kTall128,    MoeTileConfig::kTall128Gather,
        MoeTileConfig::kWide128Pair,   MoeTileConfig::kWide256Pair};
    for (const MoeTileConfig c : kAll) {
        if (std::strcmp(text, moeTileConfigName(c)) == 0) {
            *config = c;
            return true;
        }
    }
    return false;
}

const char* moeTileConfigName(MoeTileConfig config) {
    switch (config) {
        case MoeTileConfig::kAuto:
            return "auto";
        case MoeTileConfig::kTiny8:
            return "tiny8";
        case MoeTileConfig::kSmall16:
            return "small16";
        case MoeTileConfig::kSmall32:
            return "small32";
        case MoeTileConfig::kSmall64:
            return "small64";
        case MoeTileConfig::kSmall128:
            return "small128";
        case MoeTileConfig::kWide128:
            return "wide128";
        case MoeTileConfig::kWide256:
            return "wide256";
        case MoeTileConfig::kWide288:
            return "wide288";
        case MoeTileConfig::kWide256Gather:
            return "wide256g";
        case MoeTileConfig::kTall128:
            return "tall128";
        case MoeTileConfig::kTall128Gather:
            return "tall128g";
        case MoeTileConfig::kWide128Pair:
            return "wide128pair";
        case MoeTileConfig::kWide256Pair:
            return "wide256pair";
    }
    return "?";
}

MoeTileConfig resolveMoeTileConfig(const MoeParams& params, const MoeCudaOptions& options) {
    if (options.tile != MoeTileConfig::kAuto) {
        AFD_CHECK(shapeFits(params, cuda::tileShape(options.tile)),
                  "MoE tile config {} needs inter % {} == 0 and hidden % {} == 0 (inter {}, hidden {})",
                  moeTileConfigName(options.tile), cuda::gateUpColumnsPerItem(cuda::tileShape(options.tile)),
                  cuda::downRowsPerItem(cuda::tileShape(options.tile)), params.inter, params.hidden);
        return options.tile;
    }
    // Mean routing entries per expert decides between the memory-bound shapes (one consumer, two or three CTAs per
    // SM, the token tile just above the typical count so each expert's weights stream once) and the wide shapes.
    // NOTE: the CTA-pair shapes measured the same as the single-CTA ones (docs/cuda-moe-notes.md, v8), so the
    // simpler launch is kept.
    // Entries per expert: of the entries this rank serves (servedEntries), which are all of them with one FFN rank.
    const int64_t entries = servedEntries(params);
    const int64_t mean = params.num_experts > 0 ? entries / params.num_experts : 0;
    MoeTileConfig config = entries <= kTinyEntries ? MoeTileConfig::kTiny8 : MoeTileConfig::kSmall16;
    // NOTE: kWide288 up to 288 entries per expert: with uniform routing at T = 4096 it is 8 % faster than kWide256
    // (most experts then read their weights once), with zipf routing 5 % slower (docs/cuda-moe-notes.md, v10).
    // The boundaries around kWide128 are v14's sweep (docs/bench-runs/v14-experiments.log, calls 19-20): from a mean of
    // 17 (T = 384 for Qwen3-30B-A3B) kWide128 is as fast as kSmall64 with uniform routing and 7-14 % faster with zipf;
    // above 112 (T = 2048) a 128-token tile leaves about half the experts a second, nearly empty tile, and kWide288 is
    // 5-13 % faster with uniform routing (2 % slower with zipf at 128).
    // v16 (docs/bench-runs/v16-experiments.log, calls 13-15, each tile in its own invocation): from a mean of 64 (T =
    // 1024) kTall128 (256 weight rows x 128 tokens, so each token tile is read by half as many items) is the fastest
    // with zipf routing at every T (2048 6-12 %, 4096 3-7 %, 16384 2-3 % faster than kWide288 / kWide256) and with both
    // routings at T = 1024-1536 (2-5 % faster than kWide128); with uniform routing at T = 2048-4096 kWide288, whose
    // tile holds a whole expert, is 1.5-12 % faster. The host cannot see the skew before the launch; the choice favours
    // skewed routing, the shape real routers produce.
    // v27 (docs/bench-runs/v27-experiments.log, calls 5-8, every tile in its own invocation, two rounds): since tall128
    // took the dynamic schedule, the down kernel per expert and the combine by part, it is faster than the small and
    // wide shapes from half a routing entry per expert (T = 8: 3-4 %, T = 32: 6 %, T = 512 zipf 6 %, T = 768 7-9 %);
    // at T = 4-6 (a quarter to three eighths of an entry) small16 is as fast or faster. From 10 to 24 entries per
    // expert (T = 160-383) tall128g, whose gate-up kernel starts without the gather, is 1-2 % faster still (T = 256
    // uniform 298 against 303 us, zipf 304.5 against 308); at 8 and from 24 it is slower.
    const MoeTileConfig tall = MoeTileConfig::kTall128;
    const MoeTileConfig tall_gather = MoeTileConfig::kTall128Gather;
    if (entries > kTinyEntries && 2 * entries >= params.num_experts && shapeFits(params, cuda::tileShape(tall))) {
        config = mean >= kTallGatherMinMean && mean < kTallGatherMaxMean ? tall_gather : tall;
    } else if (mean > 288) {
        config = MoeTileConfig::kWide256;
    } else if (mean > 112) {
        config = MoeTileConfig::kWide288;
    } else if (mean > 16) {
        config = MoeTileConfig::kWide128;
    } else if (mean > 4) {
        config = MoeTileConfig::kSmall64;
    }
    if (!shapeFits(params, cuda::tileShape(config))) {
        config = MoeTileConfig::kSmall128;
    }
    return config;
}

MoeCudaPlan planMoeCuda(const MoeParams& params, const MoeCudaOptions& options) {
    checkMoeParams(params);
    MoeCudaPlan plan;
    plan.tile = resolveMoeTileConfig(params, options);
    const cuda::TileShape shape = cuda::tileShape(plan.tile);
    const int64_t entries = params.num_tokens * params.top_k;
    plan.fused_routing = options.fuse_small_routing && !shape.tma_tokens && entries <= cuda::kFusedRoutingEntries;
    plan.fused_combine = entries <= std::min<int64_t>(options.fused_combine_entries, cuda::kFusedCombineEntries);
    // tall128g's cp.async producer takes the token-TMA shapes' item ring, down kernel per expert and combine by part,
    // with the permute kernel only: it zeroes their words (the fused routing has none).
    const bool ring_paths = shape.tma_tokens || (cuda::isTall128Gather(shape) && !plan.fused_routing);
    plan.dynamic_schedule = options.dynamic_schedule && ring_paths;
    // The gate-up kernels that stream beside the gather (moe_gemm_tiles.cuh, kStreamsBesideGather): wide128 with its
    // prefetch. The other token-TMA kernels cannot share an SM with the gather kernel's CTAs: they gather their rows
    // themselves.
    plan.slot_gather = options.slot_gather && shape.tma_tokens;
    plan.gather_in_gate_up = plan.slot_gather && !(options.gate_up_prefetch && plan.tile == MoeTileConfig::kWide128);
    // Memory-bound batches only (at most kDownPerExpertEntries routing entries per expert on average): at T = 16384
    // the down items beside the gate-up kernel's last ones (and its gather in two warps, not three) were 2-5 % slower.
    const int64_t served = servedEntries(params);
    const bool memory_bound = served <= kDownPerExpertEntries * params.num_experts;
    plan.down_per_expert =
        options.down_per_expert && memory_bound && ring_paths && shape.cluster == 1 && !plan.fused_combine;
    // The combine by part: one part per weight tile of the down kernel (a block of hidden rows), whose columns the
    // combine's CTAs split into 8-column pieces of whole tokens (launchMoeCombineByPart's rule).
    const int64_t parts = params.hidden / cuda::downRowsPerItem(shape);
    const int64_t part_cols = parts > 0 ? params.hidden / parts : 0;
    const bool by_part = options.combine_by_part && plan.down_per_expert &&
                         served <= kCombineByPartEntriesPerExpert * params.num_experts && parts >= 1 &&
                         parts <= cuda::kMaxCombineParts && part_cols >= 8 && part_cols % 8 == 0 &&
                         256 % (part_cols / 8) == 0;
    plan.combine_parts = by_part ? static_cast<int>(parts) : 0;
    plan.gate_up_on_permute_words = options.gate_up_on_permute_words && plan.gather_in_gate_up &&
                                    cuda::permuteChunks(static_cast<int>(entries)) > 0;
    return plan;
}

MoePackedWeightBytes moePackedWeightBytes(int64_t num_experts, int64_t hidden, int64_t inter) {
    return {cuda::packedGateUpElements(num_experts, hidden, inter) * 2,
            cuda::packedDownElements(num_experts, hidden, inter) * 2};
}

void moePackWeightsCuda(const core::Bf16* w13, const core::Bf16* w2, int64_t num_experts, int64_t hidden, int64_t inter,
                        core::Bf16* w13_packed, core::Bf16* w2_packed, void* stream) {
    AFD_CHECK(hidden % 64 == 0 && inter % 32 == 0 && num_experts >= 0,
              "moePackWeightsCuda needs hidden % 64 == 0 and inter % 32 == 0, got hidden {} inter {}", hidden, inter);
    AFD_CUDA_CHECK(cuda::launchPackMoeWeights(
        reinterpret_cast<const uint16_t*>(w13), reinterpret_cast<const uint16_t*>(w2), num_experts, hidden, inter,
        reinterpret_cast<uint16_t*>(w13_packed), reinterpret_cast<uint16_t*>(w2_packed), asStream(stream)));
}

size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter) {
    return workspaceLayout(num_tokens, top_k, num_experts, hidden, inter).total;
}

MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes) {
    const WorkspaceLayout l =
        workspaceLayout(params.num_tokens, params.top_k, params.num_experts, params.hidden, params.inter);
    AFD_CHECK(workspace != nullptr && workspace_bytes >= l.total,
              "MoE CUDA workspace of {} bytes is too small: T {} needs {}", workspace_bytes, params.num_tokens,
              l.total);
    AFD_CHECK(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0, "MoE CUDA workspace must be {}-byte aligned",
              kAlign);
    auto* base = static_cast<uint8_t*>(workspace);
    MoeWorkspaceView v;
    v.expert_count = reinterpret_cast<int32_t*>(base + l.expert_count);
    v.slot_offset = reinterpret_cast<int32_t*>(base + l.slot_offset);
    v.tile_offset = reinterpret_cast<int32_t*>(base + l.tile_offset);
    v.entry_slot = reinterpret_cast<int32_t*>(base + l.entry_slot);
    v.chunk_counts = reinterpret_cast<int32_t*>(base + l.chunk_counts);
    v.slot_token = reinterpret_cast<int32_t*>(base + l.slot_token);
    v.x_sorted = reinterpret_cast<core::Bf16*>(base + l.x_sorted);
    v.h = reinterpret_cast<core::Bf16*>(base + l.h);
    v.y = reinterpret_cast<core::Bf16*>(base + l.y);
    return v;
}

void moePermuteCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0 || r.fused_routing) {
        return;
    }
    AFD_CUDA_CHECK(cuda::launchMoePermute(
        params.topk_ids, static_cast<int>(params.num_tokens * params.top_k), static_cast<int>(params.top_k),
        static_cast<int>(params.num_experts), cuda::multiTileTokens(r.shape.block_tokens), r.shape.block_tokens,
        r.view.expert_count, r.view.slot_offset, r.view.tile_offset, r.view.entry_slot, r.view.slot_token,
        r.view.chunk_counts, r.dynamic || r.slot_gather || r.h_ready != nullptr ? r.schedule : nullptr,
        static_cast<int>(syncWords(params.num_experts)), r.permute_ready, traceLayerWords(options), asStream(stream),
        options.programmatic_launch));
}

void moeGateUpCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                   const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    const int64_t rows = params.num_tokens * params.top_k;
    GroupedGemmArgs args = commonArgs(params, r, options, true);
    args.b_src = reinterpret_cast<const uint16_t*>(params.x);
    args.out = reinterpret_cast<uint16_t*>(r.view.h);
    args.k = static_cast<int>(params.hidden);
    args.b_ld = static_cast<int>(params.hidden);
    args.out_ld = static_cast<int>(params.inter);
    args.n_tiles = static_cast<int>(params.inter / cuda::gateUpColumnsPerItem(r.shape));
    args.prefetch_before_wait = options.gate_up_prefetch ? 1 : 0;
    args.permute_ready = r.permute_ready;
    args.permute_ready_ctas = r.permute_ready_ctas;
    if (r.fused_routing) {
        args.routing_out.expert_count = r.view.expert_count;
        args.routing_out.slot_offset = r.view.slot_offset;
        args.routing_out.tile_offset = r.view.tile_offset;
        args.routing_out.entry_slot = r.view.entry_slot;
        args.routing_out.slot_token = r.view.slot_token;
    }
    const CUtensorMap tmap_a = packedWeightMap(params.w13, params.num_experts, params.inter / 32, params.hidden / 64,
                                               static_cast<uint32_t>(cuda::gateUpColumnsPerItem(r.shape) / 32));
    CUtensorMap tmap_b;
    CUtensorMap tmap_b_full;
    std::memset(&tmap_b, 0, sizeof(tmap_b));
    std::memset(&tmap_b_full, 0, sizeof(tmap_b_full));
    if (r.slot_gather) {
        args.gathered = r.schedule + 2 * cuda::kScheduleWords;
        args.gathered_exit = args.gathered + params.num_experts;
    }
    if (r.gather_in_gate_up) {
        args.gather_x = reinterpret_cast<const uint16_t*>(params.x);
        args.gather_out = reinterpret_cast<uint16_t*>(r.view.x_sorted);
    } else if (r.slot_gather) {
        AFD_CUDA_CHECK(cuda::launchMoeGatherBySlot(reinterpret_cast<const uint16_t*>(params.x), r.view.slot_token,
                                                   r.view.slot_offset, static_cast<int>(params.num_experts),
                                                   static_cast<int>(params.hidden),
                                                   reinterpret_cast<uint16_t*>(r.view.x_sorted), args.gathered,
                                                   smCount(), asStream(stream), options.programmatic_launch));
    } else if (r.shape.tma_tokens) {
        AFD_CUDA_CHECK(cuda::launchMoeGather(
            reinterpret_cast<const uint16_t*>(params.x), r.view.entry_slot, static_cast<int>(params.num_tokens),
            static_cast<int>(params.top_k), static_cast<int>(params.hidden),
            reinterpret_cast<uint16_t*>(r.view.x_sorted), smCount(), asStream(stream), options.programmatic_launch));
    }
    if (r.shape.tma_tokens) {
        args.b_src = reinterpret_cast<const uint16_t*>(r.view.x_sorted);
        tmap_b = matrixTensorMap(r.view.x_sorted, rows, params.hidden, tokenBoxRows(r.shape), MapOf::kTokens);
        tmap_b_full = matrixTensorMap(r.view.x_sorted, rows, params.hidden, fullTokenBoxRows(r.shape), MapOf::kTokens);
    }
    AFD_CUDA_CHECK(dispatchGroupedGemm(r.config, true, tmap_a, tmap_b, tmap_b_full, args, asStream(stream),
                                       options.programmatic_launch));
}

void moeDownCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                 const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0) {
        return;
    }
    const int64_t rows = params.num_tokens * params.top_k;
    GroupedGemmArgs args = commonArgs(params, r, options, false);
    args.b_src = reinterpret_cast<const uint16_t*>(r.view.h);
    args.out = reinterpret_cast<uint16_t*>(r.view.y);
    args.k = static_cast<int>(params.inter);
    args.b_ld = static_cast<int>(params.inter);
    args.out_ld = static_cast<int>(params.hidden);
    args.n_tiles = static_cast<int>(params.hidden / cuda::downRowsPerItem(r.shape));
    args.prefetch_before_wait = options.down_prefetch && rows > kNoDownPrefetchEntries ? 1 : 0;
    args.part_done = r.part_done;
    if (r.fused_combine) {
        args.combine.entry_slot = r.view.entry_slot;
        args.combine.topk_weights = params.topk_weights;
        args.combine.out = static_cast<uint16_t*>(params.out);
    }
    const CUtensorMap tmap_a =
        packedWeightMap(params.w2, params.num_experts, params.hidden / 64, (params.inter + 63) / 64,
                        static_cast<uint32_t>(cuda::downRowsPerItem(r.shape) / 64));
    CUtensorMap tmap_b;
    CUtensorMap tmap_b_full;
    std::memset(&tmap_b, 0, sizeof(tmap_b));
    std::memset(&tmap_b_full, 0, sizeof(tmap_b_full));
    if (r.shape.tma_tokens) {
        tmap_b = matrixTensorMap(r.view.h, rows, params.inter, tokenBoxRows(r.shape), MapOf::kTokens);
        tmap_b_full = matrixTensorMap(r.view.h, rows, params.inter, fullTokenBoxRows(r.shape), MapOf::kTokens);
    }
    AFD_CUDA_CHECK(dispatchGroupedGemm(r.config, false, tmap_a, tmap_b, tmap_b_full, args, asStream(stream),
                                       options.programmatic_launch));
}

void moeCombineCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    const Resolved r = prepare(params, workspace, workspace_bytes, options);
    if (params.num_tokens == 0 || r.fused_combine) {
        return;
    }
    if (r.part_done != nullptr) {
        AFD_CUDA_CHECK(cuda::launchMoeCombineByPart(
            r.view.entry_slot, params.topk_weights, reinterpret_cast<const uint16_t*>(r.view.y),
            static_cast<uint16_t*>(params.out), static_cast<int>(params.num_tokens), static_cast<int>(params.top_k),
            static_cast<int>(params.hidden), r.parts, r.part_done, r.view.tile_offset + params.num_experts,
            traceLayerWords(options), asStream(stream), options.programmatic_launch));
        return;
    }
    AFD_CUDA_CHECK(cuda::launchMoeCombine(
        r.view.entry_slot, params.topk_weights, reinterpret_cast<const uint16_t*>(r.view.y),
        static_cast<uint16_t*>(params.out), static_cast<int>(params.num_tokens), static_cast<int>(params.top_k),
        static_cast<int>(params.hidden), traceLayerWords(options), asStream(stream), options.programmatic_launch));
}

void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream,
                    const MoeCudaOptions& options) {
    moePermuteCuda(params, workspace, workspace_bytes, stream, options);
    moeGateUpCuda(params, workspace, workspace_bytes, stream, options);
    moeDownCuda(params, workspace, workspace_bytes, stream, options);
    moeCombineCuda(params, workspace, workspace_bytes, stream, options);
}

size_t routerCudaWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts) {
    return cuda::routerWorkspaceBytes(num_tokens, hidden, num_experts);
}

void routerForwardCuda(const RouterParams& params, void* workspace, size_t workspace_bytes, void* stream) {
    AFD_CHECK(params.act_dtype == ActDType::kBf16, "routerForwardCuda: act_dtype must be kBf16");
    AFD_CHECK(params.num_tokens >= 0, "routerForwardCuda: num_tokens {} < 0", params.num_tokens);
    if (params.num_tokens == 0) {
        return;
    }
    AFD_CHECK(params.x && params.gate_w && params.topk_ids && params.topk_weights,
              "routerForwardCuda: null device pointer in params");
    AFD_CHECK(params.hidden > 0 && params.hidden % 16 == 0, "routerForwardCuda: hidden {} must be a multiple of 16",
              params.hidden);
    AFD_CHECK(params.num_experts > 0 && params.num_experts % 32 == 0 && params.num_experts <= 256,
              "routerForwardCuda: num_experts {} must be a multiple of 32 and at most 256", params.num_experts);
    AFD_CHECK(params.top_k >= 1 && params.top_k <= 32 && params.top_k <= params.num_experts,
              "routerForwardCuda: top_k {} outside [1, min(32, num_experts)]", params.top_k);
    const size_t needed = cuda::routerPartialBytes(params.num_tokens, params.hidden, params.num_experts);
    AFD_CHECK(workspace != nullptr && workspace_bytes >= needed,
              "routerForwardCuda: workspace of {} bytes is too small: T {} needs {} (routerCudaWorkspaceBytes)",
              workspace_bytes, params.num_tokens, needed);
    AFD_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "routerForwardCuda: workspace must be 16-byte aligned");
    AFD_CUDA_CHECK(cuda::launchRouter(
        reinterpret_cast<const uint16_t*>(params.x), reinterpret_cast<const uint16_t*>(params.gate_w), params.logits,
        params.topk_ids, params.topk_weights, static_cast<float*>(workspace), static_cast<int>(params.num_tokens),
        static_cast<int>(params.hidden), static_cast<int>(params.num_experts), static_cast<int>(params.top_k),
        params.norm_topk_prob, asStream(stream)));
}

}  // namespace afd::kernels
