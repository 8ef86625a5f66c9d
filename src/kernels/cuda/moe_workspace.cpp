// The CUDA MoE layer's workspace layout (moe_workspace.h).
#include "kernels/cuda/moe_workspace.h"

#include "core/check.h"
#include "kernels/cuda/moe_grouped_gemm.h"

namespace afd::kernels::cuda {
namespace {

size_t alignUp(size_t value) { return (value + kMoeWorkspaceAlign - 1) / kMoeWorkspaceAlign * kMoeWorkspaceAlign; }

}  // namespace

int64_t moeScheduleWords(int64_t experts) { return 2 * kScheduleWords + 2 * (experts + 1) + kMoeMaxCombineParts; }

MoeWorkspaceLayout moeWorkspaceLayout(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter) {
    const size_t entries = static_cast<size_t>(tokens * top_k);
    MoeWorkspaceLayout l;
    size_t at = 0;
    l.expert_count = at;
    at = alignUp(at + static_cast<size_t>(experts) * 4);
    l.slot_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.tile_offset = at;
    at = alignUp(at + static_cast<size_t>(experts + 1) * 4);
    l.chunk_counts = at;
    at = alignUp(at + static_cast<size_t>(moePermuteChunks(tokens * top_k)) * experts * 4);
    l.combine_counters = at;
    at = alignUp(at + static_cast<size_t>(hidden / 64) * 4);
    l.schedule = at;
    at = alignUp(at + static_cast<size_t>(moeScheduleWords(experts)) * 4);
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

MoeWorkspaceRegions moeWorkspaceRegions(const MoeParams& params, void* workspace, size_t workspace_bytes) {
    const MoeWorkspaceLayout l =
        moeWorkspaceLayout(params.num_tokens, params.top_k, params.num_experts, params.hidden, params.inter);
    AFD_CHECK(workspace != nullptr && workspace_bytes >= l.total,
              "MoE CUDA workspace of {} bytes is too small: T {} needs {}", workspace_bytes, params.num_tokens,
              l.total);
    AFD_CHECK(reinterpret_cast<uintptr_t>(workspace) % kMoeWorkspaceAlign == 0,
              "MoE CUDA workspace must be {}-byte aligned", kMoeWorkspaceAlign);
    auto* base = static_cast<uint8_t*>(workspace);
    auto words = [&](size_t offset) { return reinterpret_cast<int32_t*>(base + offset); };
    auto rows = [&](size_t offset) { return reinterpret_cast<core::Bf16*>(base + offset); };
    MoeWorkspaceRegions r;
    r.view.expert_count = words(l.expert_count);
    r.view.slot_offset = words(l.slot_offset);
    r.view.tile_offset = words(l.tile_offset);
    r.view.chunk_counts = words(l.chunk_counts);
    r.view.entry_slot = words(l.entry_slot);
    r.view.slot_token = words(l.slot_token);
    r.view.x_sorted = rows(l.x_sorted);
    r.view.h = rows(l.h);
    r.view.y = rows(l.y);
    r.combine_counters = words(l.combine_counters);
    r.schedule = words(l.schedule);
    r.down_schedule = r.schedule + kScheduleWords;
    r.gathered = r.schedule + 2 * kScheduleWords;
    r.gathered_exit = r.gathered + params.num_experts;
    r.h_ready = r.gathered_exit + 1;
    r.h_ready_exit = r.h_ready + params.num_experts;
    r.part_done = r.h_ready_exit + 1;
    r.permute_ready = words(l.permute_ready);
    return r;
}

}  // namespace afd::kernels::cuda
