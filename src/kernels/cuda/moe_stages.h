// Internal launchers of the MoE permute and combine stages and of the router (moe_permute.cu, moe_combine.cu,
// router.cu). Each returns the launch status; the host code in moe_cuda.cpp checks it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace afd::kernels::cuda {

// Most experts the permute stage handles (one thread per expert in its scans).
inline constexpr int kMaxPermuteExperts = 1024;
// Words of one GEMM kernel's dynamic-schedule counters (GroupedGemmArgs::schedule).
inline constexpr int kScheduleWords = 2;
// Up to this many routing entries the permute stage is one CTA; beyond, two kernels over chunks of 1024.
inline constexpr int kSingleCtaPermuteEntries = 2048;

// Chunks of the two-kernel permute path for num_entries (0: one CTA); chunk_counts holds chunks * E ints. The scatter
// kernel's CTAs, one per chunk, are what count ready_words[1] (launchMoePermute).
int permuteChunks(int num_entries);

// Groups the routing entries by expert. topk_ids [num_entries] (entry t*K + j); ids outside [0, num_experts)
// are not served. Writes expert_count [E], slot_offset [E + 1], tile_offset [E + 1] (expertTokenTiles: one tile up to
// single_tile_tokens >= block_tokens, else tiles of block_tokens),
// entry_slot [num_entries] (-1 when not served) and slot_token [valid entries]; chunk_counts
// [permuteChunks(num_entries), E] is scratch. Also zeroes schedule[0, schedule_words) when not null (the gate-up
// kernel's dynamic-schedule counters and the slot-order gather's counts, read after this grid has completed).
// trace_layer: MoeCudaOptions::trace's layer words (MoeTraceLayerWord), or nullptr. ready_words [2] (two-kernel path
// only, else ignored; may be null): the count kernel zeroes them, the scatter kernel lets its dependents launch at its
// start and adds, with release, 1 to [0] once the offsets and the zeroed schedule words are written (CTA 0) and 1 to
// [1] per CTA once its slots are written (MoeCudaOptions::gate_up_on_permute_words; permuteChunks CTAs in all).
cudaError_t launchMoePermute(const int32_t* topk_ids, int num_entries, int top_k, int num_experts, int block_tokens,
                             int single_tile_tokens, int32_t* expert_count, int32_t* slot_offset, int32_t* tile_offset,
                             int32_t* entry_slot, int32_t* slot_token, int32_t* chunk_counts, int32_t* schedule,
                             int schedule_words, int32_t* ready_words, uint64_t* trace_layer, cudaStream_t stream,
                             bool programmatic);

// x_sorted[entry_slot[t, j]] = x[t] for every served entry (entry_slot >= 0), one warp per token (at most 8
// CTAs per SM); rows of `hidden` bf16, hidden % 8 == 0.
cudaError_t launchMoeGather(const uint16_t* x, const int32_t* entry_slot, int num_tokens, int top_k, int hidden,
                            uint16_t* x_sorted, int sm_count, cudaStream_t stream, bool programmatic);

// The same rows in slot order, for a gate-up kernel that runs beside it (one 256-thread CTA per SM): the CTAs copy
// x_sorted[s] = x[slot_token[s]] a group of 8 slots each in turn, so the experts' rows complete in expert order,
// and after each group add its rows to gathered[e] of their experts (release), which the gate-up kernel's producers
// wait for instead of this grid (GroupedGemmArgs::gathered). slot_offset [E + 1]; gathered [E] zero before.
cudaError_t launchMoeGatherBySlot(const uint16_t* x, const int32_t* slot_token, const int32_t* slot_offset,
                                  int num_experts, int hidden, uint16_t* x_sorted, int32_t* gathered, int sm_count,
                                  cudaStream_t stream, bool programmatic);

// out[t] = sum_j topk_weights[t, j] * y[entry_slot[t, j]] over served entries (fp32), bf16 out [T, H];
// zero for a token with no served entry. hidden % 8 == 0.
cudaError_t launchMoeCombine(const int32_t* entry_slot, const float* topk_weights, const uint16_t* y, uint16_t* out,
                             int num_tokens, int top_k, int hidden, uint64_t* trace_layer, cudaStream_t stream,
                             bool programmatic);

// The same sums, block by block of hidden rows (MoeCudaOptions::combine_by_part): part p is columns [p H / parts,
// (p + 1) H / parts), summed once part_done[p] >= *total_items (the down kernel counts each finished item of its
// weight tile p there, GroupedGemmArgs::part_done; total_items is the permute's token-tile total). Without a
// programmatic launch the down grid has completed first; with one, the CTAs take the SMs the down CTAs leave and sum
// the finished parts while its last items run. (H / parts) / 8 must divide 256.
cudaError_t launchMoeCombineByPart(const int32_t* entry_slot, const float* topk_weights, const uint16_t* y,
                                   uint16_t* out, int num_tokens, int top_k, int hidden, int parts,
                                   const int32_t* part_done, const int32_t* total_items, uint64_t* trace_layer,
                                   cudaStream_t stream, bool programmatic);
// Most parts of the combine by part (words of the workspace's part_done).
inline constexpr int kMaxCombineParts = 32;

// Router (router.cu): logits = x . gate_w^T (bf16 tensor cores, fp32 accumulation, the reduction split over CTAs
// into partial sums in `workspace`), softmax, top-k, optional renormalisation. x [T, H] bf16, gate_w [E, H] bf16,
// logits [T, E] fp32 (may be null), topk_ids/topk_weights [T, K], workspace routerWorkspaceBytes(T, H, E) bytes.
// hidden % 16 == 0, num_experts % 32 == 0, num_experts <= 256, top_k <= min(32, num_experts).
size_t routerWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);
// What one launch for exactly num_tokens uses of that workspace (the check per call; no loop over smaller T).
size_t routerPartialBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);
cudaError_t launchRouter(const uint16_t* x, const uint16_t* gate_w, float* logits, int32_t* topk_ids,
                         float* topk_weights, float* workspace, int num_tokens, int hidden, int num_experts, int top_k,
                         bool renormalize, cudaStream_t stream);

// The expert weights in the grouped GEMMs' packed layout (moe_pack_weights.cu; moe_cuda.h, moePackWeightsCuda):
// w13 [E, 2I, H] and w2 [E, H, I] row-major in, packedGateUpElements / packedDownElements bf16 values out.
size_t packedGateUpElements(int64_t experts, int64_t hidden, int64_t inter);
size_t packedDownElements(int64_t experts, int64_t hidden, int64_t inter);
cudaError_t launchPackMoeWeights(const uint16_t* w13, const uint16_t* w2, int64_t experts, int64_t hidden,
                                 int64_t inter, uint16_t* w13_packed, uint16_t* w2_packed, cudaStream_t stream);

// Fills n bf16 values with uniform random numbers in [-scale, scale) from (seed, index) (benchmarks, tests).
cudaError_t launchFillRandomBf16(uint16_t* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace afd::kernels::cuda
