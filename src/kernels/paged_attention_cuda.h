// CUDA (Hopper, sm_90a) causal grouped-query attention over a paged BF16 KV cache, for the chunks of one engine step
// (prefill chunks, chunked-prefill pieces and decode rows together). The reference is kernels::pagedAttentionCpu
// (attention.h). Includable by g++: no CUDA headers; streams are passed as `void*` (a cudaStream_t, nullptr = the
// default stream).
//
// Chunk i holds the query rows [q_start[i], q_start[i + 1]) (n rows) of one sequence whose KV length after this step
// is seq_len[i] (the step's new K/V already written to the cache). Row r of the chunk sits at position
// p = seq_len[i] - n + (r - q_start[i]) and attends to the positions [0, p] of its sequence, read through its row of
// block_tables; query head h reads KV head h / (num_heads / num_kv_heads). Softmax in FP32 with the running maximum,
// FP32 accumulation, each output rounded to BF16 once. A row whose position is negative (a chunk with seq_len 0: the
// padding rows of a replayed CUDA graph) gets zeros. Memory use is linear in the length (flash-style tiling).
//
// Kernels: chunks of one query row run the decode kernel (the KV context cut into splits whose size depends on the
// chunk's length alone, merged by a combine kernel), in every call, so that a row's output is the same bits whatever
// else the step holds (batch invariance); chunks of more rows run the prefill kernel (FlashAttention-style tiles of
// 128 query rows). No allocation, no host synchronisation and no host read of device data: a call can be captured in
// a CUDA graph, whose launch sizes come only from the host-known fields (num_seqs, max_q_len, max_seq_len, the head
// counts and dimensions); in a replay the device contents of q_start / seq_len / block_tables may change within those
// bounds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace afd::kernels {

// The head_dim at which the CUDA attention ops store (and attend over) heads of a model's `head_dim`: itself when the
// kernels take it (16, 32, 64, 128, 256); else, for an even head_dim below 256, the smallest of those above it, the
// model's head in the first head_dim lanes and zeros after (qkvRopeCuda's rope_dim; zeros add nothing to q·k, and
// the attention output's padded lanes are zero). Any other head_dim is returned as it is (the kernels refuse it).
constexpr int64_t pagedAttentionHeadDim(int64_t head_dim) {
    if (head_dim < 2 || head_dim > 256 || head_dim % 2 != 0) return head_dim;
    int64_t stored = 16;
    while (stored < head_dim) stored *= 2;
    return stored;
}

struct PagedAttentionCudaParams {
    int num_seqs = 0;                       // S: chunks in this call, one per sequence of the step (or DBO stage)
    int num_heads = 0;                      // query heads; num_heads % num_kv_heads == 0 (GQA of any ratio)
    int num_kv_heads = 0;                   //
    int head_dim = 0;                       // 16, 32, 64, 128 or 256
    int block_size = 0;                     // KV block (page) size in tokens: 16, 32, 64 or 128
    float scale = 1.0f;                     // softmax scale, usually head_dim^-0.5
    const uint16_t* q = nullptr;            // [T, num_heads, head_dim] bf16, T = q_start[S]
    const uint16_t* k_cache = nullptr;      // [num_blocks, block_size, num_kv_heads, head_dim] bf16
    const uint16_t* v_cache = nullptr;      // [num_blocks, block_size, num_kv_heads, head_dim] bf16
    const int32_t* q_start = nullptr;       // [S + 1] device, non-decreasing, q_start[0] = 0
    const int32_t* seq_len = nullptr;       // [S] device: KV length of chunk i after this step
    const int32_t* block_tables = nullptr;  // [S, max_blocks_per_seq] device: block j of chunk i's sequence holds
                                            // the positions [j * block_size, (j + 1) * block_size)
    int max_blocks_per_seq = 0;
    uint16_t* out = nullptr;     // [T, num_heads, head_dim] bf16
    int max_q_len = 1;           // host bound on q_start[i + 1] - q_start[i]; 1 = a decode-only call
    int max_seq_len = 0;         // host bound on seq_len[i]; <= max_blocks_per_seq * block_size
    void* workspace = nullptr;   // device scratch (the decode kernel's split partials), 16-byte aligned
    size_t workspace_bytes = 0;  // >= pagedAttentionWorkspaceBytes(num_seqs, max_q_len, num_heads, head_dim, ...)
};

// Scratch bytes a call with these bounds needs (0 when it needs none); a workspace sized for larger bounds serves
// every smaller call.
size_t pagedAttentionWorkspaceBytes(int num_seqs, int max_q_len, int num_heads, int head_dim, int max_seq_len);

// Enqueues the attention on `stream`. Checks the arguments first (AFD_CHECK, core::Error naming the field): supported
// head_dim and block_size, head divisibility, non-null pointers, bounds, workspace size; a CUDA launch failure throws
// through AFD_CUDA_CHECK.
void pagedAttentionCuda(const PagedAttentionCudaParams& params, void* stream);

}  // namespace afd::kernels
