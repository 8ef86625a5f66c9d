// CUDA ops of the attention side between the GEMMs: embedding gather, fused residual add + RMSNorm, the q/k/v
// post-processing of the fused QKV projection (bias, per-head RMSNorm, RoPE, paged KV write), dtype conversions and
// the masking of padded routing rows. Includable by g++: no CUDA headers; streams are `void*` (a cudaStream_t,
// nullptr = the default stream).
//
// Numerics of the GPU engine: the residual stream is FP32 [T, H]; the inputs of GEMMs (normed activations) are BF16;
// every op computes in FP32 and rounds once where it stores BF16.
//
// Every launcher checks its arguments (AFD_CHECK: shapes, alignment, null pointers) before any CUDA call, enqueues
// its kernel on `stream` and throws (AFD_CUDA_CHECK) on a launch error. None allocates, synchronises or reads device
// data on the host, and each grid depends only on the sizes in its params, so every op can be captured in a CUDA
// graph. All pointers are device pointers. num_tokens (num_rows) 0 launches nothing.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "kernels/embedding.h"
#include "kernels/moe.h"

namespace afd::kernels {

// out[t] = float(table[ids[t]]) as embeddingCpu, with EmbeddingParams' shapes. An id outside [0, vocab_size) is not
// read: its row of out is zero (the host validates ids; this keeps the kernel memory-safe).
// Requires hidden % 8 == 0 and 16-byte aligned table and out.
void embeddingCuda(const EmbeddingParams& params, void* stream);

// The op between two blocks: residual += delta + bias, then out = bf16(weight * (r * rsqrt(mean(r^2) + eps))) per row
// (rmsNormCpu of the updated residual). With `rows`, the final norm before the LM head instead: out[r] = the norm of
// residual[rows[r]] (no add, residual unchanged).
struct AddRmsNormParams {
    int64_t num_tokens = 0;  // T: rows of residual
    int64_t hidden = 0;      // H: % 8 == 0, at most kMaxAddRmsNormHidden
    float eps = 1e-6f;
    float* residual = nullptr;    // [T, H] fp32; updated in place when delta is given
    const void* delta = nullptr;  // [T, H] delta_dtype, or null: no add
    ActDType delta_dtype = ActDType::kBf16;
    const core::Bf16* bias = nullptr;    // [H] added to delta, or null; only with delta
    const core::Bf16* weight = nullptr;  // [H]
    const int32_t* rows = nullptr;       // [num_rows] rows of residual to normalise, or null: every row
    int64_t num_rows = 0;                // R: with rows; a row outside [0, T) gives a zero row of out
    core::Bf16* out = nullptr;           // [T, H], or [R, H] with rows
};
inline constexpr int64_t kMaxAddRmsNormHidden = 32768;

// Requires 16-byte aligned residual, delta, bias, weight and out.
void addRmsNormCuda(const AddRmsNormParams& params, void* stream);

// Post-processing of the fused QKV projection per token, as the CPU model runner does it per head: bias, then
// RMSNorm over head_dim (q_norm for q heads, k_norm for k heads; Qwen3), then RoPE rotate-half (rope.h) with the
// angles of rope_cos / rope_sin row positions[t]. q goes to q_out; k (normed, rotated) and v (plus bias) are written
// into the paged caches at slot slot_mapping[t] = block * block_size + offset (position `offset` of cache block
// `block`, the layout of attention.h).
//
// Padded heads: with rope_dim < head_dim, every head holds a head of rope_dim values (the model's head_dim) in its
// first rope_dim lanes, stored at a head_dim the attention kernels take (paged_attention_cuda.h,
// pagedAttentionHeadDim): the RMSNorm's mean and the rotate-half pairs (i, i + rope_dim / 2) are over those lanes
// alone, and lanes [rope_dim, head_dim) of q_out, k and v are written as zeros, whatever the inputs hold there. So
// q·k and the attention output over the stored heads are those of the model's heads (the output's padded lanes zero).
// This path is a simple per-head kernel: small models only (rope_dim == head_dim takes the vectorised one).
struct QkvRopeParams {
    int64_t num_tokens = 0;    // T
    int64_t num_heads = 0;     // nh
    int64_t num_kv_heads = 0;  // nkv
    int64_t head_dim = 0;      // hd: one of 16, 32, 64, 128, 256 (the stored heads' lanes)
    int64_t rope_dim = 0;      // rd: the model's head_dim, even, 2 <= rd <= hd; 0 means hd
    float eps = 1e-6f;
    const void* qkv = nullptr;  // [T, (nh + 2 nkv) hd] qkv_dtype: the q heads, then the k heads, then the v heads
    ActDType qkv_dtype = ActDType::kBf16;  // FP32: the projection's output before any rounding to bf16
    const core::Bf16* qkv_bias = nullptr;  // [(nh + 2 nkv) hd], or null
    const core::Bf16* q_norm = nullptr;    // [hd] (lanes from rd on unread), or null: no q norm
    const core::Bf16* k_norm = nullptr;    // [hd], or null: no k norm
    const int32_t* positions = nullptr;    // [T]; outside [0, max_position): q_out's row zero, no cache write
    const float* rope_cos = nullptr;       // [max_position, rd / 2] (ropeTableCpu of positions 0 .. max_position - 1)
    const float* rope_sin = nullptr;       // [max_position, rd / 2]
    int64_t max_position = 0;
    const int32_t* slot_mapping = nullptr;  // [T]; -1 (or any slot outside the caches): the token is not written
    int64_t num_blocks = 0;
    int64_t block_size = 0;         // 1 .. 1024 (16 .. 128 in the engine)
    core::Bf16* q_out = nullptr;    // [T, nh, hd]
    core::Bf16* k_cache = nullptr;  // [num_blocks, block_size, nkv, hd]
    core::Bf16* v_cache = nullptr;  // [num_blocks, block_size, nkv, hd]
};

// Requires 16-byte aligned pointers (rope tables included).
void qkvRopeCuda(const QkvRopeParams& params, void* stream);

// out[i] = in[i] converted: bf16 -> fp32 exactly, fp32 -> bf16 rounded to nearest even (core::floatToBf16Bits: NaN
// stays a quiet NaN). from == to is a copy.
struct CastParams {
    int64_t count = 0;
    ActDType from = ActDType::kBf16;
    ActDType to = ActDType::kF32;
    const void* in = nullptr;  // [count] of `from`
    void* out = nullptr;       // [count] of `to`; must not overlap in
};

// Requires 16-byte aligned in and out.
void castCuda(const CastParams& params, void* stream);

// Routing of a padded batch (CUDA graph replay at a bucket size): rows r >= *num_valid get ids -1 and weights 0, so
// the MoE layer serves none of their entries. num_valid is read on the device (its value may change between replays).
struct MaskPaddedRowsParams {
    int64_t num_rows = 0;                // T_pad
    int64_t top_k = 0;                   // K
    const int32_t* num_valid = nullptr;  // [1]
    int32_t* topk_ids = nullptr;         // [T_pad, K]
    float* topk_weights = nullptr;       // [T_pad, K], or null
};

void maskPaddedRowsCuda(const MaskPaddedRowsParams& params, void* stream);

}  // namespace afd::kernels
