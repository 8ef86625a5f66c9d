// The device workspace of the CUDA MoE layer (moeCudaWorkspaceBytes, moeWorkspaceView in kernels/moe_cuda.h): one
// allocation of 256-byte aligned regions laid out from (T, K, E, H, I) alone, so that every stage of a layer finds
// the same regions. Host-only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {

inline constexpr size_t kMoeWorkspaceAlign = 256;

// Byte offsets of the regions, and the total.
struct MoeWorkspaceLayout {
    size_t expert_count = 0;      // [E]
    size_t slot_offset = 0;       // [E + 1]
    size_t tile_offset = 0;       // [E + 1]
    size_t chunk_counts = 0;      // [moePermuteChunks(T K), E]
    size_t combine_counters = 0;  // [H / 64] the fused combine's counts per block of hidden rows
    size_t schedule = 0;          // [moeScheduleWords(E)]
    size_t permute_ready = 0;     // [2] MoePermuteParams::ready_words
    size_t entry_slot = 0;        // [T K]
    size_t slot_token = 0;        // [T K]
    size_t x_sorted = 0;          // [T K, H] bf16
    size_t h = 0;                 // [T K, I] bf16
    size_t y = 0;                 // [T K, H] bf16
    size_t total = 0;
};
MoeWorkspaceLayout moeWorkspaceLayout(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter);

// Words of the schedule region, all zeroed by the permute stage: the dynamic-schedule words of the gate-up and of the
// down kernel, the slot-order gather's counts [E] and exit count [1], the gate-up items done per expert [E] and exit
// count [1], the down items done per part [kMoeMaxCombineParts].
int64_t moeScheduleWords(int64_t experts);

// The regions of a workspace as device pointers (GroupedGemmArgs' names).
struct MoeWorkspaceRegions {
    MoeWorkspaceView view;
    int32_t* combine_counters = nullptr;
    int32_t* schedule = nullptr;       // the whole schedule region; the gate-up kernel's words first
    int32_t* down_schedule = nullptr;  // [kScheduleWords]
    int32_t* gathered = nullptr;       // [E]
    int32_t* gathered_exit = nullptr;  // [1]
    int32_t* h_ready = nullptr;        // [E]
    int32_t* h_ready_exit = nullptr;   // [1]
    int32_t* part_done = nullptr;      // [kMoeMaxCombineParts]
    int32_t* permute_ready = nullptr;  // [2]
};
// Throws core::Error when the workspace is null, smaller than the layout's total or not 256-byte aligned.
MoeWorkspaceRegions moeWorkspaceRegions(const MoeParams& params, void* workspace, size_t workspace_bytes);

}  // namespace afd::kernels::cuda
