// Internal launchers of the MoE layer's permute, gather and combine stages and of the weight packing (moe_permute.cu,
// moe_gather.cu, moe_combine.cu, moe_pack_weights.cu): a params struct of device pointers and sizes each, and a
// launcher that enqueues on `stream` and returns the launch status, which the host code (moe_stage_launch.cpp)
// checks. The stages launch with programmatic dependent launch. Host-only header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/moe_cuda_plan.h"

namespace afd::kernels::cuda {

// Groups the routing entries by expert. Up to kMoeSingleCtaPermuteEntries entries one CTA; beyond, a count kernel and
// a scatter kernel over moePermuteChunks(num_entries) chunks (the scatter kernel's CTAs, one per chunk, are what
// count ready_words[1]).
struct MoePermuteParams {
    const int32_t* topk_ids = nullptr;  // [num_entries] entry t K + j; ids outside [0, num_experts) are not served
    int num_entries = 0;
    int top_k = 0;
    int num_experts = 0;  // <= kMoeMaxExperts
    // An expert's tokens take one tile up to single_tile_tokens (>= block_tokens), else tiles of block_tokens
    // (expertTokenTiles, moe_token_tiles.cuh).
    int block_tokens = 0;
    int single_tile_tokens = 0;
    int32_t* expert_count = nullptr;  // [E] out
    int32_t* slot_offset = nullptr;   // [E + 1] out: first slot of each expert, [E] = served entries
    int32_t* tile_offset = nullptr;   // [E + 1] out: first token tile of each expert
    int32_t* entry_slot = nullptr;    // [num_entries] out: slot of each entry, -1 when not served
    int32_t* slot_token = nullptr;    // [served entries] out: token of each slot
    int32_t* chunk_counts = nullptr;  // [moePermuteChunks(num_entries), E] scratch
    // Zeroed when not null: the gate-up kernel's dynamic-schedule counters, the slot-order gather's counts and the
    // down kernel per expert's counts (the workspace's schedule words), read after this stage has completed.
    int32_t* schedule = nullptr;
    int schedule_words = 0;
    // [2], two-kernel path only (else ignored; may be null): the count kernel zeroes them; the scatter kernel lets its
    // dependents launch at its start and adds, with release, 1 to [0] once the offsets and the zeroed schedule words
    // are written (CTA 0) and 1 to [1] per CTA once its slots are written (MoeCudaPlan::gate_up_on_permute_words).
    int32_t* ready_words = nullptr;
};
cudaError_t launchMoePermute(const MoePermuteParams& params, cudaStream_t stream);

// x_sorted[s] = x[slot_token[s]] in slot order, for wide128's gate-up kernel that runs beside it (one 256-thread CTA
// per SM): the CTAs copy a group of 8 slots each in turn, so the experts' rows complete in expert order, and after
// each group add its rows to gathered[e] of their experts (release), which the gate-up kernel's producers wait for
// instead of this grid (GroupedGemmArgs::gathered).
struct MoeGatherParams {
    const uint16_t* x = nullptr;           // [T, hidden] bf16
    const int32_t* slot_token = nullptr;   // [served entries]
    const int32_t* slot_offset = nullptr;  // [E + 1]
    int num_experts = 0;
    int hidden = 0;                // % 8 == 0
    uint16_t* x_sorted = nullptr;  // [served entries, hidden] bf16 out
    int32_t* gathered = nullptr;   // [E] counts, zero before
    int sm_count = 0;
};
cudaError_t launchMoeGather(const MoeGatherParams& params, cudaStream_t stream);

// out[t] = sum_j topk_weights[t, j] * y[entry_slot[t, j]] over served entries, summed in fp32 in entry order, rounded
// to bf16 once (or stored as fp32 with out_f32); zero for a token with no served entry. parts > 0
// (MoeCudaPlan::combine_parts): block by block of hidden rows, part p (columns [p H / parts, (p + 1) H / parts)) summed
// once part_done[p] >= *total_items (the down kernel counts each finished item of its weight tile p there; total_items
// is the permute's token-tile total), on the SMs the down CTAs leave while its last items run; (H / parts) / 8 must
// divide 256. parts 0: after the down grid.
struct MoeCombineParams {
    const int32_t* entry_slot = nullptr;  // [num_tokens * top_k], -1 when not served
    const float* topk_weights = nullptr;  // [num_tokens * top_k]
    const uint16_t* y = nullptr;          // [slots, hidden] bf16
    void* out = nullptr;                  // [num_tokens, hidden] bf16, or fp32 with out_f32
    bool out_f32 = false;
    int num_tokens = 0;
    int top_k = 0;
    int hidden = 0;  // % 8 == 0
    int parts = 0;
    const int32_t* part_done = nullptr;    // [parts]
    const int32_t* total_items = nullptr;  // [1]
};
cudaError_t launchMoeCombine(const MoeCombineParams& params, cudaStream_t stream);

// The expert weights in the grouped GEMMs' packed layout (moe_pack_weights.cu; moe_cuda.h, moePackWeightsCuda):
// row-major w13 [E, 2I, H] and w2 [E, H, I] in, packedGateUpElements / packedDownElements bf16 values out at the
// packed width moePackedWidth(I) (the rows and columns past I zero).
struct MoePackWeightsParams {
    const uint16_t* w13 = nullptr;  // [E, 2I, H] bf16
    const uint16_t* w2 = nullptr;   // [E, H, I] bf16
    int64_t experts = 0;
    int64_t hidden = 0;  // % 64 == 0
    int64_t inter = 0;   // I >= 1: the row-major weights' width
    uint16_t* w13_packed = nullptr;
    uint16_t* w2_packed = nullptr;
};
// Elements of the packed matrices of an MLP of width `inter` (rounded up to the packed width).
size_t packedGateUpElements(int64_t experts, int64_t hidden, int64_t inter);
size_t packedDownElements(int64_t experts, int64_t hidden, int64_t inter);
cudaError_t launchMoePackWeights(const MoePackWeightsParams& params, cudaStream_t stream);

}  // namespace afd::kernels::cuda
