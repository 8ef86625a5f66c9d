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

// The decode kernel cuts each chunk's context into splits whose size depends on the chunk's length alone, never on the
// batch or on a graph's bounds, so a row's attention is the same number however many rows share the call (batch
// invariance): a chunk of L tokens takes splits of max(kDecodeMinSplitTokens, ceil(L / kDecodeSplitsPerChunk))
// tokens rounded up to kDecodeSplitGranule, at most kDecodeMaxSplitTokens (the most one CTA's page lookup covers).
// Splits beyond the first are merged by the combine kernel in split order. The grid holds about kDecodeTargetCtas
// CTAs (two per SM of a 132-SM H200) when the batch alone would leave SMs idle: each CTA takes the splits
// x, x + grid x, ... of its chunk, which changes the order of nothing. A fixed target rather than the device's SM
// count: the plan, and so the workspace, depends only on the call's bounds.
inline constexpr int kDecodeTargetCtas = 264;
inline constexpr int kDecodeSplitGranule = 64;
inline constexpr int kDecodeMinSplitTokens = 256;
inline constexpr int kDecodeSplitsPerChunk = 32;
inline constexpr int kDecodeMaxSplitTokens = 2048;
// Query heads of one decode CTA (the M of its m16n8k16 tiles); a larger GQA group takes several CTAs per KV head.
inline constexpr int kDecodeHeadsPerCta = 16;
// Most chunks one prefill call takes (its CTAs keep the per-chunk tile offsets in shared memory).
inline constexpr int kPrefillMaxSeqs = 4096;

// The split size of a chunk of `len` tokens (the rule above; host and device).
__host__ __device__ constexpr int decodeSplitTokens(int len) {
    const int per_chunk = (len + kDecodeSplitsPerChunk - 1) / kDecodeSplitsPerChunk;
    const int granules = (per_chunk + kDecodeSplitGranule - 1) / kDecodeSplitGranule;
    const int tokens = granules * kDecodeSplitGranule;
    return tokens < kDecodeMinSplitTokens ? kDecodeMinSplitTokens
                                          : (tokens > kDecodeMaxSplitTokens ? kDecodeMaxSplitTokens : tokens);
}

// Splits of a chunk of `len` tokens (at least 1).
__host__ __device__ constexpr int decodeSplits(int len) {
    const int tokens = decodeSplitTokens(len);
    return len <= tokens ? 1 : (len + tokens - 1) / tokens;
}

struct DecodeSplitPlan {
    int splits = 1;  // partial slots per chunk: the splits of a chunk at the bound max_seq_len
    int grid = 1;    // grid x: CTAs per (chunk, KV head block), each taking every grid-th split
};

// units: CTAs per split index (num_seqs * num_kv_heads * head blocks).
DecodeSplitPlan decodeSplitPlan(int64_t units, int max_seq_len);

// Bytes of the decode partials for `splits` (0 for one split): o [S, splits, H, D] then lse [S, splits, H], fp32.
size_t decodePartialBytes(int num_seqs, int splits, int num_heads, int head_dim);

// The decode kernel with `plan` over the chunks of one query row (chunks of more rows are left to the prefill kernel),
// and the combine kernel after it when plan.splits > 1.
cudaError_t launchPagedDecode(const PagedAttentionCudaParams& p, const DecodeSplitPlan& plan, cudaStream_t stream);

// The prefill kernels: mma.sync m16n8k16 (every head_dim) and wgmma (head_dim 64, 128, 256). Persistent grids of at
// most `sm_count` times the kernel's CTAs per SM.
// skip_single_rows: chunks of one query row get no tiles (the decode kernel serves them in the same call).
cudaError_t launchPagedPrefillMma(const PagedAttentionCudaParams& p, int sm_count, bool skip_single_rows,
                                  cudaStream_t stream);
cudaError_t launchPagedPrefillWgmma(const PagedAttentionCudaParams& p, int sm_count, bool skip_single_rows,
                                    cudaStream_t stream);
bool pagedPrefillWgmmaSupports(int head_dim);

// Which prefill kernel a call with max_q_len > 1 runs: kAuto is pagedAttentionCuda's choice (wgmma where it supports
// the head_dim); the others force one, for the tests that check both against the CPU reference.
enum class PagedPrefillKernel { kAuto, kMma, kWgmma };

// pagedAttentionCuda with the prefill kernel chosen (the same checks; kWgmma with an unsupported head_dim throws).
void pagedAttentionCudaWith(const PagedAttentionCudaParams& params, PagedPrefillKernel prefill, void* stream);

}  // namespace afd::kernels::cuda
