// Internal launchers of the paged attention kernels (paged_attention_decode.cu, paged_attention_prefill_mma.cu,
// paged_attention_prefill_wgmma.cu) and the decode kernel's split plan. Each launcher returns the launch status and
// assumes checked arguments; the host code in paged_attention_cuda.cpp checks them. Host-only header (CUDA runtime
// types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/paged_attention_cuda.h"

namespace afd::kernels::cuda {

// The decode kernel cuts each chunk's context into splits so that about kDecodeTargetCtas CTAs (two per SM of a
// 132-SM H200) stream the KV when the batch alone would leave SMs idle: a chunk of L tokens takes
// max(want, ceil(L / kDecodeMaxSplitTokens)) splits (at most the grid's), of a whole number of kDecodeSplitGranule
// tokens, at least one granule and at most kDecodeMaxSplitTokens each; the grid holds the splits of a chunk at the
// bound max_seq_len. The split size is worked out on the device from the chunk's real length, so a graph captured with
// a loose bound still spreads short contexts over all the splits it asks for. A fixed target rather than the device's
// SM count: the plan, and so the workspace, depends only on the call's bounds.
inline constexpr int kDecodeTargetCtas = 264;
inline constexpr int kDecodeSplitGranule = 64;
inline constexpr int kDecodeMaxSplitTokens = 2048;
// Query heads of one decode CTA (the M of its m16n8k16 tiles); a larger GQA group takes several CTAs per KV head.
inline constexpr int kDecodeHeadsPerCta = 16;
// Most chunks one prefill call takes (its CTAs keep the per-chunk tile offsets in shared memory).
inline constexpr int kPrefillMaxSeqs = 4096;

struct DecodeSplitPlan {
    int splits = 1;        // grid x: the splits of a chunk at the bound
    int split_tokens = 0;  // their size at the bound
    int want = 1;          // splits every chunk asks for: max(1, kDecodeTargetCtas / units)
};

// units: CTAs per split index (num_seqs * num_kv_heads * head blocks). More units never mean more splits, so the
// plan for units = num_seqs bounds every call with those bounds (pagedAttentionWorkspaceBytes).
DecodeSplitPlan decodeSplitPlan(int64_t units, int max_seq_len);

// Bytes of the decode partials for `splits` (0 for one split): o [S, splits, H, D] then lse [S, splits, H], fp32.
size_t decodePartialBytes(int num_seqs, int splits, int num_heads, int head_dim);

// The decode kernel (max_q_len == 1) with `plan`, and the combine kernel after it when plan.splits > 1.
cudaError_t launchPagedDecode(const PagedAttentionCudaParams& p, const DecodeSplitPlan& plan, cudaStream_t stream);

// The prefill kernels: mma.sync m16n8k16 (every head_dim) and wgmma (head_dim 64, 128, 256). Persistent grids of at
// most `sm_count` times the kernel's CTAs per SM.
cudaError_t launchPagedPrefillMma(const PagedAttentionCudaParams& p, int sm_count, cudaStream_t stream);
cudaError_t launchPagedPrefillWgmma(const PagedAttentionCudaParams& p, int sm_count, cudaStream_t stream);
bool pagedPrefillWgmmaSupports(int head_dim);

// Which prefill kernel a call with max_q_len > 1 runs: kAuto is pagedAttentionCuda's choice (wgmma where it supports
// the head_dim); the others force one, for the tests that check both against the CPU reference.
enum class PagedPrefillKernel { kAuto, kMma, kWgmma };

// pagedAttentionCuda with the prefill kernel chosen (the same checks; kWgmma with an unsupported head_dim throws).
void pagedAttentionCudaWith(const PagedAttentionCudaParams& params, PagedPrefillKernel prefill, void* stream);

}  // namespace afd::kernels::cuda
