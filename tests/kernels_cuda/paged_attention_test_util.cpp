#include "kernels_cuda/paged_attention_test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::kernels::test {
namespace {

// Uniform bf16 values in [-scale, scale) from a fast generator (the caches of the long cases hold 10^8 values).
void fillUniform(std::vector<core::Bf16>& v, float scale, uint64_t seed) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& e : v) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        const float unit = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        e = core::Bf16((2.0f * unit - 1.0f) * scale);
    }
}

std::vector<float> toFloats(const std::vector<core::Bf16>& v) {
    std::vector<float> f(v.size());
    std::transform(v.begin(), v.end(), f.begin(), [](core::Bf16 b) { return b.toFloat(); });
    return f;
}

size_t atLeast16(size_t bytes) { return std::max<size_t>(bytes, 16); }

}  // namespace

int PagedProblem::maxRows() const {
    int most = 0;
    for (const ChunkSpec& c : chunks) {
        most = std::max(most, c.rows);
    }
    return most;
}

int PagedProblem::maxLen() const {
    int most = 0;
    for (const ChunkSpec& c : chunks) {
        most = std::max(most, c.len);
    }
    return most;
}

PagedProblem makePagedProblem(const AttentionShape& shape, const std::vector<ChunkSpec>& chunks, std::mt19937& rng,
                              int table_blocks, int spare_blocks, int32_t unused_entry) {
    PagedProblem p;
    p.shape = shape;
    p.chunks = chunks;
    const int num_seqs = static_cast<int>(chunks.size());
    p.q_start.assign(1, 0);
    int total_blocks = 0;
    int widest = 1;
    for (const ChunkSpec& c : chunks) {
        p.q_start.push_back(p.q_start.back() + c.rows);
        p.seq_len.push_back(c.len);
        const int blocks = (c.len + shape.block_size - 1) / shape.block_size;
        total_blocks += blocks;
        widest = std::max(widest, blocks);
    }
    p.max_blocks_per_seq = table_blocks > 0 ? table_blocks : widest;
    AFD_CHECK(p.max_blocks_per_seq >= widest, "table of {} blocks for a chunk of {}", p.max_blocks_per_seq, widest);
    p.num_blocks = total_blocks + spare_blocks;
    std::vector<int32_t> order(static_cast<size_t>(p.num_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    p.block_tables.assign(static_cast<size_t>(num_seqs) * p.max_blocks_per_seq, unused_entry);
    size_t next = 0;
    for (int i = 0; i < num_seqs; ++i) {
        const int blocks = (chunks[static_cast<size_t>(i)].len + shape.block_size - 1) / shape.block_size;
        for (int j = 0; j < blocks; ++j) {
            p.block_tables[static_cast<size_t>(i) * p.max_blocks_per_seq + j] = order[next++];
        }
    }
    const size_t row = static_cast<size_t>(shape.num_heads) * shape.head_dim;
    const size_t cache = static_cast<size_t>(p.num_blocks) * shape.block_size * shape.num_kv_heads * shape.head_dim;
    p.q.resize(static_cast<size_t>(p.q_start.back()) * row);
    p.k_cache.resize(cache);
    p.v_cache.resize(cache);
    fillUniform(p.q, 2.0f, rng());
    fillUniform(p.k_cache, 1.0f, rng());
    fillUniform(p.v_cache, 1.0f, rng());
    return p;
}

std::vector<float> referencePagedAttention(const PagedProblem& p) {
    const int64_t row = static_cast<int64_t>(p.shape.num_heads) * p.shape.head_dim;
    std::vector<float> out(p.outElements(), 0.0f);
    std::vector<int32_t> token_seq;
    std::vector<int32_t> token_pos;
    std::vector<int64_t> token_row;
    for (int i = 0; i < p.numSeqs(); ++i) {
        const int n = p.q_start[static_cast<size_t>(i) + 1] - p.q_start[static_cast<size_t>(i)];
        for (int r = 0; r < n; ++r) {
            const int pos = p.seq_len[static_cast<size_t>(i)] - n + r;
            if (pos >= 0) {  // rows at negative positions attend to nothing: zeros
                token_seq.push_back(i);
                token_pos.push_back(pos);
                token_row.push_back(p.q_start[static_cast<size_t>(i)] + r);
            }
        }
    }
    if (token_row.empty()) {
        return out;
    }
    std::vector<float> q(token_row.size() * static_cast<size_t>(row));
    for (size_t t = 0; t < token_row.size(); ++t) {
        for (int64_t e = 0; e < row; ++e) {
            q[t * static_cast<size_t>(row) + static_cast<size_t>(e)] =
                p.q[static_cast<size_t>(token_row[t] * row + e)].toFloat();
        }
    }
    const std::vector<float> k = toFloats(p.k_cache);
    const std::vector<float> v = toFloats(p.v_cache);
    std::vector<float> compact(q.size());
    PagedAttentionParams params;
    params.layout.num_blocks = p.num_blocks;
    params.layout.block_size = p.shape.block_size;
    params.layout.num_kv_heads = p.shape.num_kv_heads;
    params.layout.head_dim = p.shape.head_dim;
    params.layout.block_tables = p.block_tables.data();
    params.layout.max_blocks_per_seq = p.max_blocks_per_seq;
    params.num_tokens = static_cast<int64_t>(token_row.size());
    params.num_heads = p.shape.num_heads;
    params.scale = 1.0f / std::sqrt(static_cast<float>(p.shape.head_dim));
    params.token_seq = token_seq.data();
    params.token_pos = token_pos.data();
    params.q = q.data();
    params.k_cache = k.data();
    params.v_cache = v.data();
    params.out = compact.data();
    pagedAttentionCpu(params);
    for (size_t t = 0; t < token_row.size(); ++t) {
        std::copy(compact.begin() + static_cast<int64_t>(t) * row, compact.begin() + static_cast<int64_t>(t + 1) * row,
                  out.begin() + token_row[t] * row);
    }
    return out;
}

DeviceProblem::DeviceProblem(int64_t max_rows, int max_seqs, int max_table_entries, int64_t max_cache_elements,
                             const AttentionShape& shape, size_t workspace_bytes)
    : q_(atLeast16(static_cast<size_t>(max_rows) * shape.num_heads * shape.head_dim * 2)),
      k_(atLeast16(static_cast<size_t>(max_cache_elements) * 2)),
      v_(atLeast16(static_cast<size_t>(max_cache_elements) * 2)),
      q_start_(atLeast16(static_cast<size_t>(max_seqs + 1) * 4)),
      seq_len_(atLeast16(static_cast<size_t>(max_seqs) * 4)),
      tables_(atLeast16(static_cast<size_t>(max_table_entries) * 4)),
      out_(atLeast16(static_cast<size_t>(max_rows) * shape.num_heads * shape.head_dim * 2)),
      workspace_(atLeast16(workspace_bytes)) {}

DeviceProblem::DeviceProblem(const PagedProblem& problem, size_t workspace_bytes)
    : DeviceProblem(problem.numRows(), problem.numSeqs(), static_cast<int>(problem.block_tables.size()),
                    static_cast<int64_t>(problem.k_cache.size()), problem.shape, workspace_bytes) {
    upload(problem);
}

void DeviceProblem::upload(const PagedProblem& problem) {
    q_.upload(problem.q.data(), problem.q.size() * 2);
    k_.upload(problem.k_cache.data(), problem.k_cache.size() * 2);
    v_.upload(problem.v_cache.data(), problem.v_cache.size() * 2);
    q_start_.upload(problem.q_start.data(), problem.q_start.size() * 4);
    seq_len_.upload(problem.seq_len.data(), problem.seq_len.size() * 4);
    tables_.upload(problem.block_tables.data(), problem.block_tables.size() * 4);
}

PagedAttentionCudaParams DeviceProblem::params(const PagedProblem& problem, int max_q_len, int max_seq_len) const {
    PagedAttentionCudaParams p;
    p.num_seqs = problem.numSeqs();
    p.num_heads = problem.shape.num_heads;
    p.num_kv_heads = problem.shape.num_kv_heads;
    p.head_dim = problem.shape.head_dim;
    p.block_size = problem.shape.block_size;
    p.scale = 1.0f / std::sqrt(static_cast<float>(problem.shape.head_dim));
    p.q = q_.as<uint16_t>();
    p.k_cache = k_.as<uint16_t>();
    p.v_cache = v_.as<uint16_t>();
    p.q_start = q_start_.as<int32_t>();
    p.seq_len = seq_len_.as<int32_t>();
    p.block_tables = tables_.as<int32_t>();
    p.max_blocks_per_seq = problem.max_blocks_per_seq;
    p.out = out_.as<uint16_t>();
    p.max_q_len = max_q_len;
    p.max_seq_len = max_seq_len;
    p.workspace = workspace_.get();
    p.workspace_bytes = workspace_.bytes();
    return p;
}

std::vector<float> DeviceProblem::output(const PagedProblem& problem) const {
    return toFloat(out_.download<core::Bf16>(problem.outElements()));
}

std::vector<float> runPagedAttention(const PagedProblem& problem, cuda::PagedPrefillKernel prefill, int max_q_len,
                                     int max_seq_len) {
    const int q_bound = max_q_len > 0 ? max_q_len : std::max(problem.maxRows(), 1);
    const int len_bound = max_seq_len > 0 ? max_seq_len : problem.maxLen();
    const size_t ws = pagedAttentionWorkspaceBytes(problem.numSeqs(), q_bound, problem.shape.num_heads,
                                                   problem.shape.head_dim, len_bound);
    DeviceProblem device(problem, ws);
    device.poisonOutput();
    PagedAttentionCudaParams params = device.params(problem, q_bound, len_bound);
    AFD_CUDA_CHECK(cudaMemset(params.workspace, 0xFF, params.workspace_bytes));
    cuda::pagedAttentionCudaWith(params, prefill, nullptr);
    AFD_CUDA_CHECK(cudaDeviceSynchronize());
    return device.output(problem);
}

ErrorReport compareOutputs(const PagedProblem& problem, const std::vector<float>& got, const std::vector<float>& want) {
    ErrorReport report;
    report.total = relativeL2(got, want);
    const size_t row = static_cast<size_t>(problem.shape.num_heads) * problem.shape.head_dim;
    for (int i = 0; i < problem.numSeqs(); ++i) {
        const size_t begin = static_cast<size_t>(problem.q_start[static_cast<size_t>(i)]) * row;
        const size_t end = static_cast<size_t>(problem.q_start[static_cast<size_t>(i) + 1]) * row;
        if (begin == end) {
            continue;
        }
        const double e = relativeL2(
            std::vector<float>(got.begin() + static_cast<int64_t>(begin), got.begin() + static_cast<int64_t>(end)),
            std::vector<float>(want.begin() + static_cast<int64_t>(begin), want.begin() + static_cast<int64_t>(end)));
        if (!(e <= report.worst_chunk)) {  // NaN-aware: an infinite or NaN error always wins
            report.worst_chunk = e;
            report.worst_chunk_index = i;
        }
    }
    return report;
}

}  // namespace afd::kernels::test
