// Host side of the CUDA MoE layer (kernels/moe_cuda.h): checks the params, resolves the plan's workspace regions and
// launches the four stages on the caller's stream, each stage's kernels with the arguments its plan gives them.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/moe_tensor_maps.h"
#include "kernels/cuda/moe_workspace.h"
#include "kernels/moe_cuda.h"

namespace afd::kernels {
namespace {

using cuda::GroupedGemmArgs;
using cuda::GroupedGemmParams;

void checkMoeParams(const MoeParams& p) {
    AFD_CHECK(p.act_dtype == ActDType::kBf16, "moeForwardCuda: act_dtype must be kBf16");
    // NOTE: the kernels index rows of x, x_sorted, h and y with 32-bit element offsets.
    AFD_CHECK(p.num_tokens * p.top_k * std::max(p.hidden, p.inter) < (int64_t{1} << 31),
              "moeForwardCuda: T * top_k * max(hidden, inter) = {} does not fit 32-bit offsets",
              p.num_tokens * p.top_k * std::max(p.hidden, p.inter));
    if (p.num_tokens > 0) {
        AFD_CHECK(p.x && p.topk_ids && p.topk_weights && p.w13 && p.w2 && p.out,
                  "moeForwardCuda: null device pointer in params");
    }
}

int smCount() {
    int device = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&device));
    int count = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
}

cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// What every stage of a layer needs: the checked params' plan, its tile's shape and the workspace's regions.
struct Stage {
    const MoeParams& params;
    const MoeCudaPlan& plan;
    MoeTileShape shape;
    cuda::MoeWorkspaceRegions ws;
    int64_t entries;  // T K
};

Stage prepare(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes) {
    checkMoeParams(params);
    AFD_CHECK(plan.tile != MoeTileConfig::kAuto, "MoE CUDA: the plan names no tile (make it with planMoeCuda)");
    return {params, plan, moeTileShape(plan.tile), cuda::moeWorkspaceRegions(params, workspace, workspace_bytes),
            params.num_tokens * params.top_k};
}

// The arguments both GEMM kernels of a layer share.
GroupedGemmArgs commonArgs(const Stage& s, bool gate_up) {
    const MoeParams& p = s.params;
    GroupedGemmArgs args;
    args.slot_token = s.ws.view.slot_token;
    args.slot_offset = s.ws.view.slot_offset;
    args.tile_offset = s.ws.view.tile_offset;
    args.num_experts = static_cast<int>(p.num_experts);
    args.weights_read_once = s.plan.weights_read_once ? 1 : 0;
    args.weights_shared_per_item = s.plan.weights_shared_per_item ? 1 : 0;
    args.top_k = static_cast<int>(p.top_k);
    args.release_early = s.plan.release_early ? 1 : 0;
    args.max_token_tiles = static_cast<int>(s.entries);
    if (s.plan.fused_routing) {
        args.fused_entries = static_cast<int>(s.entries);
        args.topk_ids = p.topk_ids;
    }
    if (s.plan.dynamic_schedule) {
        // The permute kernel zeroes the gate-up kernel's words, the gate-up kernel the down kernel's.
        args.schedule = gate_up ? s.ws.schedule : s.ws.down_schedule;
        args.down_schedule = gate_up ? s.ws.down_schedule : nullptr;
    }
    if (s.plan.down_per_expert) {
        args.h_ready = s.ws.h_ready;
        args.h_ready_exit = gate_up ? nullptr : s.ws.h_ready_exit;
        args.h_ready_items_per_tile = static_cast<int>(p.inter / gateUpColumnsPerItem(s.shape));
    }
    if (s.plan.fused_combine) {
        // The gate-up kernel zeroes the counters, the down kernel combines into out.
        args.combine.counters = s.ws.combine_counters;
        args.combine.num_counters = static_cast<int>(p.hidden / 64);
        args.combine.num_tokens = static_cast<int>(p.num_tokens);
    }
    return args;
}

// The launchers of kMoeTiles, row by row.
template <size_t... kRows>
constexpr auto tileLaunchers(std::index_sequence<kRows...>) {
    using Launcher = cudaError_t (*)(const GroupedGemmParams&, cudaStream_t);
    return std::array<Launcher, sizeof...(kRows)>{&cuda::launchGroupedGemm<kMoeTiles[kRows].config>...};
}
constexpr auto kTileLaunchers = tileLaunchers(std::make_index_sequence<kMoeTileCount>());

}  // namespace

namespace cuda {

cudaError_t launchGroupedGemm(MoeTileConfig tile, const GroupedGemmParams& params, cudaStream_t stream) {
    const size_t row = static_cast<size_t>(tile) - 1;  // kMoeTiles rows are in the enum's order
    return row < kTileLaunchers.size() ? kTileLaunchers[row](params, stream) : cudaErrorInvalidValue;
}

}  // namespace cuda

MoePackedWeightBytes moePackedWeightBytes(int64_t num_experts, int64_t hidden, int64_t inter) {
    const int64_t packed = moePackedWidth(inter);
    return {cuda::packedGateUpElements(num_experts, hidden, packed) * 2,
            cuda::packedDownElements(num_experts, hidden, packed) * 2};
}

void moePackWeightsCuda(const core::Bf16* w13, const core::Bf16* w2, int64_t num_experts, int64_t hidden, int64_t inter,
                        core::Bf16* w13_packed, core::Bf16* w2_packed, void* stream) {
    AFD_CHECK(hidden % 64 == 0 && inter >= 1 && num_experts >= 0,
              "moePackWeightsCuda needs hidden % 64 == 0 and inter >= 1, got hidden {} inter {}", hidden, inter);
    cuda::MoePackWeightsParams p;
    p.w13 = reinterpret_cast<const uint16_t*>(w13);
    p.w2 = reinterpret_cast<const uint16_t*>(w2);
    p.experts = num_experts;
    p.hidden = hidden;
    p.inter = inter;
    p.w13_packed = reinterpret_cast<uint16_t*>(w13_packed);
    p.w2_packed = reinterpret_cast<uint16_t*>(w2_packed);
    AFD_CUDA_CHECK(cuda::launchMoePackWeights(p, asStream(stream)));
}

size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter) {
    return cuda::moeWorkspaceLayout(num_tokens, top_k, num_experts, hidden, inter).total;
}

MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes) {
    return cuda::moeWorkspaceRegions(params, workspace, workspace_bytes).view;
}

void moePermuteCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream) {
    const Stage s = prepare(params, plan, workspace, workspace_bytes);
    if (params.num_tokens == 0 || plan.fused_routing) {
        return;
    }
    cuda::MoePermuteParams p;
    p.topk_ids = params.topk_ids;
    p.num_entries = static_cast<int>(s.entries);
    p.top_k = static_cast<int>(params.top_k);
    p.num_experts = static_cast<int>(params.num_experts);
    p.block_tokens = multiTileTokens(s.shape.block_tokens);
    p.single_tile_tokens = s.shape.block_tokens;
    p.expert_count = s.ws.view.expert_count;
    p.slot_offset = s.ws.view.slot_offset;
    p.tile_offset = s.ws.view.tile_offset;
    p.entry_slot = s.ws.view.entry_slot;
    p.slot_token = s.ws.view.slot_token;
    p.chunk_counts = s.ws.view.chunk_counts;
    if (plan.dynamic_schedule || s.shape.tma_tokens || plan.down_per_expert) {
        p.schedule = s.ws.schedule;
        p.schedule_words = static_cast<int>(cuda::moeScheduleWords(params.num_experts));
    }
    p.ready_words = plan.gate_up_on_permute_words ? s.ws.permute_ready : nullptr;
    AFD_CUDA_CHECK(cuda::launchMoePermute(p, asStream(stream)));
}

void moeGateUpCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                   void* stream) {
    const Stage s = prepare(params, plan, workspace, workspace_bytes);
    if (params.num_tokens == 0) {
        return;
    }
    GroupedGemmParams launch;
    launch.gate_up = true;
    launch.sm_count = smCount();
    GroupedGemmArgs& args = launch.args;
    args = commonArgs(s, true);
    args.b_src = reinterpret_cast<const uint16_t*>(params.x);
    args.out = reinterpret_cast<uint16_t*>(s.ws.view.h);
    args.k = static_cast<int>(params.hidden);
    args.b_ld = static_cast<int>(params.hidden);
    args.out_ld = static_cast<int>(params.inter);
    args.n_tiles = static_cast<int>(params.inter / gateUpColumnsPerItem(s.shape));
    args.prefetch_before_wait = 1;
    if (plan.gate_up_on_permute_words) {
        args.permute_ready = s.ws.permute_ready;
        args.permute_ready_ctas = moePermuteChunks(s.entries);
    }
    if (plan.fused_routing) {
        args.routing_out.expert_count = s.ws.view.expert_count;
        args.routing_out.slot_offset = s.ws.view.slot_offset;
        args.routing_out.tile_offset = s.ws.view.tile_offset;
        args.routing_out.entry_slot = s.ws.view.entry_slot;
        args.routing_out.slot_token = s.ws.view.slot_token;
    }
    launch.weights = cuda::packedWeightMap(params.w13, params.num_experts, params.inter / 32, params.hidden / 64,
                                           static_cast<uint32_t>(gateUpColumnsPerItem(s.shape) / 32));
    std::memset(&launch.tokens, 0, sizeof(launch.tokens));
    std::memset(&launch.full_tokens, 0, sizeof(launch.full_tokens));
    if (s.shape.tma_tokens) {
        args.gathered = s.ws.gathered;
        args.gathered_exit = s.ws.gathered_exit;
    }
    if (plan.gather_in_gate_up) {
        args.gather_x = reinterpret_cast<const uint16_t*>(params.x);
        args.gather_out = reinterpret_cast<uint16_t*>(s.ws.view.x_sorted);
    } else if (plan.gather_kernel) {
        cuda::MoeGatherParams g;
        g.x = reinterpret_cast<const uint16_t*>(params.x);
        g.slot_token = s.ws.view.slot_token;
        g.slot_offset = s.ws.view.slot_offset;
        g.num_experts = static_cast<int>(params.num_experts);
        g.hidden = static_cast<int>(params.hidden);
        g.x_sorted = reinterpret_cast<uint16_t*>(s.ws.view.x_sorted);
        g.gathered = args.gathered;
        g.sm_count = launch.sm_count;
        AFD_CUDA_CHECK(cuda::launchMoeGather(g, asStream(stream)));
    }
    if (s.shape.tma_tokens) {
        args.b_src = reinterpret_cast<const uint16_t*>(s.ws.view.x_sorted);
        launch.tokens = cuda::tokenRowsMap(s.ws.view.x_sorted, s.entries, params.hidden, cuda::tokenBoxRows(s.shape));
        launch.full_tokens =
            cuda::tokenRowsMap(s.ws.view.x_sorted, s.entries, params.hidden, cuda::fullTokenBoxRows(s.shape));
    }
    AFD_CUDA_CHECK(cuda::launchGroupedGemm(plan.tile, launch, asStream(stream)));
}

void moeDownCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                 void* stream) {
    const Stage s = prepare(params, plan, workspace, workspace_bytes);
    if (params.num_tokens == 0) {
        return;
    }
    GroupedGemmParams launch;
    launch.gate_up = false;
    launch.sm_count = smCount();
    GroupedGemmArgs& args = launch.args;
    args = commonArgs(s, false);
    args.b_src = reinterpret_cast<const uint16_t*>(s.ws.view.h);
    args.out = reinterpret_cast<uint16_t*>(s.ws.view.y);
    args.k = static_cast<int>(params.inter);
    args.b_ld = static_cast<int>(params.inter);
    args.out_ld = static_cast<int>(params.hidden);
    args.n_tiles = static_cast<int>(params.hidden / downRowsPerItem(s.shape));
    args.prefetch_before_wait = plan.down_prefetch ? 1 : 0;
    args.part_done = plan.combine_parts > 0 ? s.ws.part_done : nullptr;
    if (plan.fused_combine) {
        AFD_CHECK(!params.out_f32, "moeDownCuda: the fused combine stores bf16; a plan for FP32 sums has none");
        args.combine.entry_slot = s.ws.view.entry_slot;
        args.combine.topk_weights = params.topk_weights;
        args.combine.out = static_cast<uint16_t*>(params.out);
    }
    launch.weights = cuda::packedWeightMap(params.w2, params.num_experts, params.hidden / 64, (params.inter + 63) / 64,
                                           static_cast<uint32_t>(downRowsPerItem(s.shape) / 64));
    std::memset(&launch.tokens, 0, sizeof(launch.tokens));
    std::memset(&launch.full_tokens, 0, sizeof(launch.full_tokens));
    if (s.shape.tma_tokens) {
        launch.tokens = cuda::tokenRowsMap(s.ws.view.h, s.entries, params.inter, cuda::tokenBoxRows(s.shape));
        launch.full_tokens = cuda::tokenRowsMap(s.ws.view.h, s.entries, params.inter, cuda::fullTokenBoxRows(s.shape));
    }
    AFD_CUDA_CHECK(cuda::launchGroupedGemm(plan.tile, launch, asStream(stream)));
}

void moeCombineCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream) {
    const Stage s = prepare(params, plan, workspace, workspace_bytes);
    if (params.num_tokens == 0 || plan.fused_combine) {
        return;
    }
    cuda::MoeCombineParams c;
    c.entry_slot = s.ws.view.entry_slot;
    c.topk_weights = params.topk_weights;
    c.y = reinterpret_cast<const uint16_t*>(s.ws.view.y);
    c.out = params.out;
    c.out_f32 = params.out_f32;
    c.num_tokens = static_cast<int>(params.num_tokens);
    c.top_k = static_cast<int>(params.top_k);
    c.hidden = static_cast<int>(params.hidden);
    if (plan.combine_parts > 0) {
        c.parts = plan.combine_parts;
        c.part_done = s.ws.part_done;
        c.total_items = s.ws.view.tile_offset + params.num_experts;
    }
    AFD_CUDA_CHECK(cuda::launchMoeCombine(c, asStream(stream)));
}

void moeForwardCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream) {
    moePermuteCuda(params, plan, workspace, workspace_bytes, stream);
    moeGateUpCuda(params, plan, workspace, workspace_bytes, stream);
    moeDownCuda(params, plan, workspace, workspace_bytes, stream);
    moeCombineCuda(params, plan, workspace, workspace_bytes, stream);
}

void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream) {
    moeForwardCuda(params, planMoeCuda(params), workspace, workspace_bytes, stream);
}

}  // namespace afd::kernels
