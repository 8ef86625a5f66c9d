#include "attention/forward_batch.h"

#include <algorithm>
#include <cstdlib>

#include "core/check.h"

namespace afd::attention {
namespace {

int64_t dboSplit(int64_t num_tokens, const std::vector<int64_t>& chunk_starts, int64_t min_tokens) {
    const int64_t T = num_tokens;
    if (T < min_tokens) return T;
    int64_t split = T / 2;
    int64_t best_distance = T;
    for (int64_t start : chunk_starts) {
        if (start > 0 && std::llabs(start - T / 2) < best_distance) {
            best_distance = std::llabs(start - T / 2);
            if (best_distance <= T / 4) split = start;
        }
    }
    return split;
}

}  // namespace

bool ForwardBatch::isDecodeOnly() const {
    if (stages.size() != 1) return false;
    const StageChunks& stage = stages[0];
    const int64_t T = numTokens();
    return T > 0 && stage.numChunks() == T && stage.max_query_len == 1 && static_cast<int64_t>(logits_rows.size()) == T;
}

ForwardBatch buildForwardBatch(const ScheduledStep& step, const ForwardBatchOptions& options) {
    AFD_CHECK(options.block_size > 0 && options.block_table_width > 0, "bad forward batch options");
    ForwardBatch b;
    b.block_table_width = options.block_table_width;
    const int64_t bs = options.block_size;
    std::vector<int64_t> chunk_starts;
    chunk_starts.reserve(step.chunks.size());
    for (const auto& c : step.chunks) {
        const Sequence& seq = *c.seq;
        AFD_CHECK(static_cast<int64_t>(seq.blocks.size()) <= options.block_table_width,
                  "sequence {} holds {} blocks, more than the block table's {}", seq.id, seq.blocks.size(),
                  options.block_table_width);
        chunk_starts.push_back(b.numTokens());
        for (int64_t pos = c.begin; pos < c.end; ++pos) {
            const int64_t block_index = pos / bs;
            AFD_CHECK(block_index < static_cast<int64_t>(seq.blocks.size()),
                      "sequence {} position {} has no block allocated", seq.id, pos);
            b.tokens.push_back(seq.tokenAt(pos));
            b.positions.push_back(static_cast<int32_t>(pos));
            b.slot_mapping.push_back(
                static_cast<int32_t>(seq.blocks[static_cast<size_t>(block_index)] * bs + pos % bs));
        }
        if (c.sample) b.logits_rows.push_back(static_cast<int32_t>(b.numTokens() - 1));
    }
    const int64_t T = b.numTokens();
    std::vector<int64_t> stage_starts = {0};
    if (options.dual_batch_overlap) stage_starts.push_back(dboSplit(T, chunk_starts, options.dbo_min_tokens));

    const auto width = static_cast<size_t>(options.block_table_width);
    for (size_t s = 0; s < stage_starts.size(); ++s) {
        StageChunks stage;
        stage.begin = stage_starts[s];
        stage.end = s + 1 < stage_starts.size() ? stage_starts[s + 1] : T;
        stage.q_start.push_back(0);
        for (size_t i = 0; i < step.chunks.size(); ++i) {
            const auto& c = step.chunks[i];
            const int64_t first = std::max(chunk_starts[i], stage.begin);
            const int64_t last = std::min(chunk_starts[i] + (c.end - c.begin), stage.end);
            if (first >= last) continue;
            const int64_t rows = last - first;
            // The KV length after this part: the position of its last row, plus one.
            const int64_t seq_len = c.begin + (last - chunk_starts[i]);
            stage.q_start.push_back(static_cast<int32_t>(last - stage.begin));
            stage.seq_len.push_back(static_cast<int32_t>(seq_len));
            stage.max_query_len = std::max(stage.max_query_len, static_cast<int32_t>(rows));
            stage.max_seq_len = std::max(stage.max_seq_len, static_cast<int32_t>(seq_len));
            const auto& blocks = c.seq->blocks;
            const size_t row = stage.block_tables.size();
            stage.block_tables.resize(row + width, -1);
            std::copy(blocks.begin(), blocks.end(), stage.block_tables.begin() + static_cast<std::ptrdiff_t>(row));
        }
        b.stages.push_back(std::move(stage));
    }
    return b;
}

}  // namespace afd::attention
