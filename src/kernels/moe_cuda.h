// CUDA (Hopper, sm_90a) implementation of the routed-expert MoE (moe.h) and the router (router.h).
// Includable by g++: no CUDA headers; streams are passed as `void*` (a cudaStream_t, nullptr = default stream).
//
// The layer runs as four stages on one stream, with no host synchronisation and no allocation, so a whole layer
// can be captured in a CUDA graph:
//   permute   counts the entries per expert, scans them into slot offsets and token-tile offsets, and lists the
//             token of every slot (slots are the routing entries grouped by expert, expert-major)
//   gate-up   grouped GEMM h[slot] = silu(Wg[e] x[token]) * (Wu[e] x[token])            (SwiGLU fused);
//             the token-TMA tiles first copy x into slot order (x_sorted) so token tiles come by TMA
//   down      grouped GEMM y[slot] = W2[e] h[slot]
//   combine   out[t] = sum over t's local entries of topk_weight * y[slot]                 (fp32 sum, bf16 out)
// The grouped GEMMs are persistent kernels over (expert, weight-row tile, token tile) work items read from the
// device-side offsets; weights stream through TMA into a multi-stage shared-memory pipeline consumed by wgmma. Which
// tile and which path of each stage a batch takes is the planner's (moe_cuda_plan.h).
// The weights MoeParams::w13 and w2 point at are in the packed layout of moePackWeightsCuda, not row-major as moe.h
// describes them for the CPU layer.
//
// Requirements (checked, AFD_CHECK): act_dtype kBf16; hidden % 64 == 0; inter % 32 == 0; 1 <= top_k;
// 1 <= num_experts <= 1024; T * top_k * max(hidden, inter) < 2^31; all pointers device pointers, 16-byte aligned.
// Ids outside [-1, num_experts) are treated as -1 (the caller validates routing).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe.h"
#include "kernels/moe_cuda_plan.h"
#include "kernels/router.h"

namespace afd::kernels {

// The expert weights of one layer in the layout the grouped GEMMs stream (MoeParams::w13 and w2 of every function
// below): blocks of 64 weight rows x 64 reduction columns, each block 8 KB of contiguous memory, the blocks of one
// k-block unit after unit, so that a grouped GEMM stage is one run of memory (moe_pack_weights.cu has the index map).
// Row-major weights put each 128-byte row of a block at its own address and streamed about 1 % slower at T = 1024 and
// 4096; a stage in four 8 KB runs was 1-3 % slower at T = 1 ... 256.
//
// Widths: the packed layout holds an MLP of any width I >= 1 at moePackedWidth(I), I rounded up to the grouped GEMMs'
// unit of 32, with the extra gate/up rows and down columns zero: silu(0) * 0 = 0, so the layer at the packed width
// computes exactly the sums of the checkpoint's width. MoeParams::inter of packed weights is the packed width.
constexpr int64_t moePackedWidth(int64_t inter) { return (inter + 31) / 32 * 32; }
// Sizes in bytes of the packed w13 and w2 of an MLP of width `inter` (w2 pads the reduction length up to a multiple of
// 64 with zeros).
struct MoePackedWeightBytes {
    size_t w13 = 0;
    size_t w2 = 0;
};
MoePackedWeightBytes moePackedWeightBytes(int64_t num_experts, int64_t hidden, int64_t inter);
// Packs row-major w13 [E, 2I, H] and w2 [E, H, I] (device memory, I = `inter` >= 1, the checkpoint's width) into
// w13_packed / w2_packed (device memory of moePackedWeightBytes) at width moePackedWidth(I), on `stream`; asynchronous.
// hidden % 64 == 0.
void moePackWeightsCuda(const core::Bf16* w13, const core::Bf16* w2, int64_t num_experts, int64_t hidden, int64_t inter,
                        core::Bf16* w13_packed, core::Bf16* w2_packed, void* stream);

// Bytes of device workspace moeForwardCuda needs for `num_tokens` tokens (size it with the largest T).
size_t moeCudaWorkspaceBytes(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter);

// Typed views of the workspace (device pointers) after a run, for tests and benchmarks.
struct MoeWorkspaceView {
    int32_t* expert_count = nullptr;  // [E] routing entries per local expert
    int32_t* slot_offset = nullptr;   // [E + 1] first slot of each expert; slot_offset[E] = valid entries
    int32_t* tile_offset = nullptr;   // [E + 1] first token tile of each expert (tiles of the tile's block_tokens)
    int32_t* chunk_counts = nullptr;  // permute scratch (per-chunk expert counts when T * K > 2048)
    int32_t* entry_slot = nullptr;    // [T * K] slot of entry (t, j), -1 when not served here
    int32_t* slot_token = nullptr;    // [T * K] token of each slot (first slot_offset[E] valid)
    core::Bf16* x_sorted = nullptr;   // [T * K, H] x in slot order (token-TMA tiles only)
    core::Bf16* h = nullptr;          // [T * K, I] SwiGLU activations per slot
    core::Bf16* y = nullptr;          // [T * K, H] expert outputs per slot (unweighted)
};
MoeWorkspaceView moeWorkspaceView(const MoeParams& params, void* workspace, size_t workspace_bytes);

// out = MoE(x) as in moe.h, on `stream`, as planMoeCuda(params) plans it. Asynchronous; no host synchronisation, no
// allocation; capturable.
void moeForwardCuda(const MoeParams& params, void* workspace, size_t workspace_bytes, void* stream);
// The same with a given plan (planMoeCuda with a chosen tile, or withStagesReplayableAlone): the lab and the tests.
void moeForwardCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream);

// The four stages of moeForwardCuda, each on `stream`, for the tests and stage timing; run in order with the same
// params, plan and workspace. With the fused routing the permute outputs exist after moeGateUpCuda; with the fused
// combine the output exists after moeDownCuda. With plan.down_per_expert the down stage needs the gate-up stage of the
// same layer before it (withStagesReplayableAlone lifts that).
void moePermuteCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream);
void moeGateUpCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                   void* stream);
void moeDownCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                 void* stream);
void moeCombineCuda(const MoeParams& params, const MoeCudaPlan& plan, void* workspace, size_t workspace_bytes,
                    void* stream);

// Bytes of device workspace routerForwardCuda needs for `num_tokens` tokens (size it with the largest T): the partial
// logits of the reduction split over CTAs.
size_t routerCudaWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);

// Router as in router.h on `stream`: logits (fp32, tensor cores, fp32 accumulation), softmax, top-k (ties: lower
// expert id), optional renormalisation. Requires act_dtype kBf16, hidden % 16 == 0, 1 <= num_experts <= 256,
// top_k <= num_experts and top_k <= 32, and a 16-byte aligned device workspace of
// routerCudaWorkspaceBytes. Two kernels, the second launched programmatically (PDL); asynchronous; capturable.
void routerForwardCuda(const RouterParams& params, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace afd::kernels
