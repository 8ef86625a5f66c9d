// Problems of the paged attention harness (paged_attention_cuda_test.cpp): random bf16 queries and paged K/V caches
// behind shuffled block tables, the fp32 CPU reference (kernels::pagedAttentionCpu on the bf16 values), and a run of
// pagedAttentionCuda with every output poisoned first.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels::test {

struct AttentionShape {
    int num_heads = 32;
    int num_kv_heads = 4;
    int head_dim = 128;
    int block_size = 16;
};

// One chunk of a step: `rows` query rows of a sequence whose KV length after the step is `len`.
struct ChunkSpec {
    int rows = 1;
    int len = 1;
};

// Host side of one call. The pages of all sequences are a random permutation of the cache's blocks (plus `spare`
// unused ones), so no sequence's blocks are contiguous; unused table entries hold `unused_entry`.
struct PagedProblem {
    AttentionShape shape;
    std::vector<ChunkSpec> chunks;
    int max_blocks_per_seq = 0;
    int num_blocks = 0;
    std::vector<int32_t> q_start;       // [S + 1]
    std::vector<int32_t> seq_len;       // [S]
    std::vector<int32_t> block_tables;  // [S, max_blocks_per_seq]
    std::vector<core::Bf16> q;          // [T, H, D]
    std::vector<core::Bf16> k_cache;    // [num_blocks, block_size, Hkv, D]
    std::vector<core::Bf16> v_cache;

    int numSeqs() const { return static_cast<int>(chunks.size()); }
    int64_t numRows() const { return q_start.back(); }
    int maxRows() const;
    int maxLen() const;
    size_t outElements() const { return static_cast<size_t>(numRows()) * shape.num_heads * shape.head_dim; }
};

// table_blocks: the block table width (0: just enough for the longest chunk).
PagedProblem makePagedProblem(const AttentionShape& shape, const std::vector<ChunkSpec>& chunks, std::mt19937& rng,
                              int table_blocks = 0, int spare_blocks = 3, int32_t unused_entry = -1);

// The fp32 reference of every output element (rows at negative positions: zeros).
std::vector<float> referencePagedAttention(const PagedProblem& problem);

// Device copies of a problem, sized once for bounds (rows, blocks, chunks) so that later problems within them can be
// uploaded into the same buffers (CUDA graph replays).
class DeviceProblem {
public:
    DeviceProblem(int64_t max_rows, int max_seqs, int max_table_entries, int64_t max_cache_elements,
                  const AttentionShape& shape, size_t workspace_bytes);
    explicit DeviceProblem(const PagedProblem& problem, size_t workspace_bytes);
    void upload(const PagedProblem& problem);  // the problem must fit the bounds
    void poisonOutput() { out_.poison(); }
    // Params of `problem` (already uploaded) with the given host bounds.
    PagedAttentionCudaParams params(const PagedProblem& problem, int max_q_len, int max_seq_len) const;
    std::vector<float> output(const PagedProblem& problem) const;

private:
    DeviceBuffer q_, k_, v_, q_start_, seq_len_, tables_, out_, workspace_;
};

// Poisons the output and workspace, runs pagedAttentionCuda (through `prefill`) with host bounds max_q_len and
// max_seq_len (0: the problem's own), synchronises, returns the output as floats.
std::vector<float> runPagedAttention(const PagedProblem& problem, cuda::PagedPrefillKernel prefill, int max_q_len = 0,
                                     int max_seq_len = 0);

// Relative L2 errors of the whole output and the worst chunk (zero-norm chunks must match exactly); all elements
// must be finite for a finite result.
struct ErrorReport {
    double total = 0.0;
    double worst_chunk = 0.0;
    int worst_chunk_index = -1;
};
ErrorReport compareOutputs(const PagedProblem& problem, const std::vector<float>& got, const std::vector<float>& want);

}  // namespace afd::kernels::test
