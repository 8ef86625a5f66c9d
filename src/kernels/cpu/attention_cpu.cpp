#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace afd::kernels {
namespace {

int64_t slotOffset(const PagedKvLayout& layout, int32_t seq, int32_t pos) {
    const int64_t block_index = pos / layout.block_size;
    AFD_CHECK(block_index < layout.max_blocks_per_seq, "position {} of sequence {} beyond its block table", pos, seq);
    const int32_t block = layout.block_tables[seq * layout.max_blocks_per_seq + block_index];
    AFD_CHECK(block >= 0 && block < layout.num_blocks, "sequence {} position {} maps to invalid block {}", seq, pos,
              block);
    const int64_t slot = static_cast<int64_t>(block) * layout.block_size + pos % layout.block_size;
    return slot * layout.num_kv_heads * layout.head_dim;
}

}  // namespace

void kvCacheWriteCpu(const KvCacheWriteParams& p) {
    const int64_t row = p.layout.num_kv_heads * p.layout.head_dim;
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const int64_t off = slotOffset(p.layout, p.token_seq[t], p.token_pos[t]);
        std::copy(p.k + t * row, p.k + (t + 1) * row, p.k_cache + off);
        std::copy(p.v + t * row, p.v + (t + 1) * row, p.v_cache + off);
    }
}

void pagedAttentionCpu(const PagedAttentionParams& p) {
    const PagedKvLayout& L = p.layout;
    AFD_CHECK(p.num_heads > 0 && L.num_kv_heads > 0 && p.num_heads % L.num_kv_heads == 0,
              "attention heads {} not a multiple of kv heads {}", p.num_heads, L.num_kv_heads);
    const int64_t group = p.num_heads / L.num_kv_heads;
    const int64_t hd = L.head_dim;
    // Validate every token's block table entries before the parallel region (bodies must not throw).
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        for (int32_t pos = 0; pos <= p.token_pos[t]; pos += static_cast<int32_t>(L.block_size)) {
            (void)slotOffset(L, p.token_seq[t], pos);
        }
        (void)slotOffset(L, p.token_seq[t], p.token_pos[t]);
    }
    core::parallelFor(p.num_tokens * p.num_heads, 4, [&](int64_t begin, int64_t end) {
        std::vector<float> scores;
        for (int64_t item = begin; item < end; ++item) {
            const int64_t t = item / p.num_heads;
            const int64_t h = item % p.num_heads;
            const int64_t kv_h = h / group;
            const int32_t seq = p.token_seq[t];
            const int32_t len = p.token_pos[t] + 1;
            const float* q = p.q + (t * p.num_heads + h) * hd;
            scores.resize(static_cast<size_t>(len));
            float max_score = -INFINITY;
            for (int32_t pos = 0; pos < len; ++pos) {
                const float* k = p.k_cache + slotOffset(L, seq, pos) + kv_h * hd;
                float dot = 0.0f;
                for (int64_t i = 0; i < hd; ++i) dot += q[i] * k[i];
                const float s = dot * p.scale;
                scores[static_cast<size_t>(pos)] = s;
                max_score = std::max(max_score, s);
            }
            float denom = 0.0f;
            for (int32_t pos = 0; pos < len; ++pos) {
                const float e = std::exp(scores[static_cast<size_t>(pos)] - max_score);
                scores[static_cast<size_t>(pos)] = e;
                denom += e;
            }
            const float inv = 1.0f / denom;
            float* out = p.out + (t * p.num_heads + h) * hd;
            std::fill(out, out + hd, 0.0f);
            for (int32_t pos = 0; pos < len; ++pos) {
                const float w = scores[static_cast<size_t>(pos)] * inv;
                const float* v = p.v_cache + slotOffset(L, seq, pos) + kv_h * hd;
                for (int64_t i = 0; i < hd; ++i) out[i] += w * v[i];
            }
        }
    });
}

}  // namespace afd::kernels
