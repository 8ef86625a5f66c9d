// Causal grouped-query attention over a paged KV cache, FP32.
//
// Cache layout (one layer): k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim]. A sequence's
// positions live in the blocks its row of `block_tables` lists: position p is slot p % block_size of block
// block_tables[seq][p / block_size]. Query token t of sequence token_seq[t] at position token_pos[t] attends to
// positions [0, token_pos[t]] of that sequence: the caller writes the step's new K/V first (kvCacheWriteCpu).
// Query head h reads KV head h / (num_heads / num_kv_heads).
#pragma once

#include <cstdint>

namespace afd::kernels {

struct PagedKvLayout {
    int64_t num_blocks = 0;
    int64_t block_size = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
    int64_t max_blocks_per_seq = 0;
};

struct KvCacheWriteParams {
    PagedKvLayout layout;
    int64_t num_tokens = 0;
    const int32_t* token_seq = nullptr;  // [T]
    const int32_t* token_pos = nullptr;  // [T]
    const float* k = nullptr;            // [T, num_kv_heads, head_dim]
    const float* v = nullptr;            // [T, num_kv_heads, head_dim]
    float* k_cache = nullptr;
    float* v_cache = nullptr;
};

void kvCacheWriteCpu(const KvCacheWriteParams& params);

struct PagedAttentionParams {
    PagedKvLayout layout;
    int64_t num_tokens = 0;
    int64_t num_heads = 0;
    float scale = 1.0f;                  // usually head_dim^-0.5
    const int32_t* token_seq = nullptr;  // [T]
    const int32_t* token_pos = nullptr;  // [T]
    const float* q = nullptr;            // [T, num_heads, head_dim]
    const float* k_cache = nullptr;
    const float* v_cache = nullptr;
    float* out = nullptr;  // [T, num_heads, head_dim]
};

// Softmax in FP32 with the running maximum subtracted; each (token, head) is computed independently and in a
// fixed order, so results do not depend on batch composition or prefill chunking.
void pagedAttentionCpu(const PagedAttentionParams& params);

}  // namespace afd::kernels
