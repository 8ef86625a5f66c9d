#include "attention/graph_batches.h"

#include <algorithm>

#include "core/check.h"

namespace afd::attention {

std::vector<int64_t> defaultGraphBatchSizes(int64_t cap) {
    AFD_CHECK(cap >= 1, "the CUDA graph batch size cap must be >= 1, got {}", cap);
    std::vector<int64_t> sizes;
    for (const int64_t b : {1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128}) sizes.push_back(b);
    for (int64_t b = 160; b <= cap; b += 32) sizes.push_back(b);
    std::erase_if(sizes, [cap](int64_t b) { return b > cap; });
    if (sizes.empty() || sizes.back() != cap) sizes.push_back(cap);
    return sizes;
}

std::optional<int64_t> graphBucketFor(std::span<const int64_t> sizes, int64_t rows) {
    const auto it = std::lower_bound(sizes.begin(), sizes.end(), rows);
    if (it == sizes.end()) return std::nullopt;
    return *it;
}

void padDecodeBatch(ForwardBatch& batch, int64_t rows) {
    AFD_CHECK(batch.stages.size() == 1, "padding a batch of {} stages: decode graphs have one", batch.stages.size());
    const int64_t T = batch.numTokens();
    AFD_CHECK(rows >= T, "padding a batch of {} rows down to {}", T, rows);
    StageChunks& stage = batch.stages[0];
    const auto width = static_cast<size_t>(batch.block_table_width);
    batch.tokens.resize(static_cast<size_t>(rows), 0);
    batch.positions.resize(static_cast<size_t>(rows), 0);
    batch.slot_mapping.resize(static_cast<size_t>(rows), -1);
    stage.seq_len.resize(static_cast<size_t>(stage.numChunks() + rows - T), 0);
    stage.block_tables.resize(stage.seq_len.size() * width, -1);
    for (int64_t r = T; r < rows; ++r) {
        batch.logits_rows.push_back(static_cast<int32_t>(r));
        stage.q_start.push_back(static_cast<int32_t>(r + 1 - stage.begin));
    }
    stage.end = rows;
    stage.max_query_len = std::max(stage.max_query_len, 1);
    batch.num_padding += rows - T;
}

ForwardBatch paddingDecodeBatch(int64_t rows, int64_t block_table_width, int32_t max_seq_len) {
    ForwardBatch batch;
    batch.block_table_width = block_table_width;
    StageChunks stage;
    stage.q_start.push_back(0);
    stage.max_query_len = 1;
    stage.max_seq_len = max_seq_len;
    batch.stages.push_back(std::move(stage));
    padDecodeBatch(batch, rows);
    return batch;
}

}  // namespace afd::attention
