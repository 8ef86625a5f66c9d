// ForwardBatch: one engine step's metadata as the model runner's ops read it, built on the host once per step from
// the scheduled chunks.
//
// Rows of the step are tokens in chunk order (each chunk a run of consecutive positions of one sequence). The step has
// one stage, or two under dual-batch overlap: stage s owns rows [begin, end); a split inside a chunk makes the chunk
// appear in both stages (the second part attends to the K/V the first part wrote earlier in the same layer). Each
// stage's chunk list follows the AttentionChunks contract (attention/device_ops.h).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/scheduler.h"

namespace afd::attention {

struct StageChunks {
    int64_t begin = 0;  // the stage's rows [begin, end) of the step
    int64_t end = 0;
    std::vector<int32_t> q_start;       // [S + 1] stage-relative first row of each chunk; q_start[S] = end - begin
    std::vector<int32_t> seq_len;       // [S] the sequence's KV length after the chunk's rows
    std::vector<int32_t> block_tables;  // [S, block_table_width] the sequence's blocks, -1 padded
    int32_t max_query_len = 0;          // the most rows of one chunk
    int32_t max_seq_len = 0;            // the largest seq_len
    int64_t numChunks() const { return static_cast<int64_t>(seq_len.size()); }
    int64_t numTokens() const { return end - begin; }
};

struct ForwardBatch {
    std::vector<int32_t> tokens;        // [T] token ids
    std::vector<int32_t> positions;     // [T] position of each token in its sequence
    std::vector<int32_t> slot_mapping;  // [T] KV slot of each token: block * block_size + position % block_size
    std::vector<int32_t> logits_rows;   // [R] the rows that sample (each sampling chunk's last), in chunk order
    std::vector<StageChunks> stages;    // 1, or 2 under dual-batch overlap (the second may be empty)
    int64_t block_table_width = 0;      // row width of every block table (fixed by the engine)
    // Trailing rows (and chunks) that are padding up to a CUDA graph's bucket (graph_batches.h): token 0 at
    // position 0, slot -1, a chunk with seq_len 0. Their logits rows are computed and ignored.
    int64_t num_padding = 0;
    int64_t numTokens() const { return static_cast<int64_t>(tokens.size()); }
    int64_t numValidTokens() const { return numTokens() - num_padding; }
    // One stage whose every chunk is one row that samples: the steps a decode graph replays.
    bool isDecodeOnly() const;
};

struct ForwardBatchOptions {
    int64_t block_size = 16;
    int64_t block_table_width = 0;  // >= the blocks of any sequence
    bool dual_batch_overlap = false;
    int64_t dbo_min_tokens = 2;  // a step with fewer tokens leaves the second stage empty
};

// Under dual-batch overlap there are always two stages, so every attention rank of an AFD deployment sends the same
// number of stages. The split is at the chunk boundary closest to half the tokens when one lies within a quarter of
// the tokens of the half; otherwise at half, inside a chunk.
ForwardBatch buildForwardBatch(const ScheduledStep& step, const ForwardBatchOptions& options);

}  // namespace afd::attention
