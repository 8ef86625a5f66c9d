// The padded batch sizes (buckets) whose decode steps are captured in CUDA graphs, and the padding that brings a
// decode step up to its bucket.
//
// A decode step of n rows replays the graph of the smallest bucket >= n: its batch gets bucket - n padding chunks
// (token 0 at position 0, KV slot -1: nothing written; seq_len 0: the attention op writes zeros; their own logits
// rows, computed and ignored), so that the step's metadata has the shape the graph was captured with.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "attention/forward_batch.h"

namespace afd::attention {

// The default ladder up to `cap`: 1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, then steps of 32; the sizes above
// cap are left out and cap itself ends the ladder, so every decode step of up to cap rows has a bucket. cap >= 1.
std::vector<int64_t> defaultGraphBatchSizes(int64_t cap);

// The smallest of `sizes` (ascending) that holds `rows`; nullopt when none does.
std::optional<int64_t> graphBucketFor(std::span<const int64_t> sizes, int64_t rows);

// Appends padding chunks to a decode-only batch (ForwardBatch::isDecodeOnly) until it has `rows` rows, and counts them
// in num_padding. rows >= batch.numTokens().
void padDecodeBatch(ForwardBatch& batch, int64_t rows);

// A decode batch of `rows` padding chunks (nothing real in it), the metadata a graph is captured with. Its stage's
// max_seq_len is `max_seq_len`: the bound the captured attention keeps for every replay.
ForwardBatch paddingDecodeBatch(int64_t rows, int64_t block_table_width, int32_t max_seq_len);

}  // namespace afd::attention
