// ForwardBatch building (per-step metadata: positions, slot mapping, per-stage chunk lists under dual-batch overlap)
// and its upload into the fixed step buffers.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "attention/cpu_ops.h"
#include "attention/forward_batch.h"
#include "attention/step_buffers.h"
#include "core/check.h"

namespace afd::attention {
namespace {

std::unique_ptr<Sequence> makeSequence(int64_t id, int64_t num_tokens, std::vector<int32_t> blocks) {
    auto seq = std::make_unique<Sequence>();
    seq->id = id;
    for (int64_t i = 0; i < num_tokens; ++i) seq->prompt.push_back(static_cast<int32_t>(100 * id + i));
    seq->blocks = std::move(blocks);
    return seq;
}

// Every row of every stage: covered once, in order, at the position the AttentionChunks rule gives, with the block
// table row of its sequence; and the slot mapping agrees with the block table.
void expectConsistent(const ForwardBatch& b, const ScheduledStep& step, int64_t block_size) {
    const int64_t W = b.block_table_width;
    int64_t next_row = 0;
    std::vector<const Sequence*> seq_of_row;
    for (const auto& c : step.chunks) {
        for (int64_t p = c.begin; p < c.end; ++p) seq_of_row.push_back(c.seq);
    }
    ASSERT_EQ(static_cast<int64_t>(seq_of_row.size()), b.numTokens());
    for (const StageChunks& stage : b.stages) {
        ASSERT_EQ(stage.begin, next_row);
        ASSERT_EQ(stage.q_start.size(), stage.seq_len.size() + 1);
        ASSERT_EQ(stage.block_tables.size(), stage.seq_len.size() * static_cast<size_t>(W));
        EXPECT_EQ(stage.q_start.front(), 0);
        EXPECT_EQ(stage.q_start.back(), stage.end - stage.begin);
        for (int64_t i = 0; i < stage.numChunks(); ++i) {
            const int32_t first = stage.q_start[static_cast<size_t>(i)];
            const int32_t last = stage.q_start[static_cast<size_t>(i + 1)];
            ASSERT_LT(first, last) << "empty chunk " << i;
            EXPECT_LE(last - first, stage.max_query_len);
            EXPECT_LE(stage.seq_len[static_cast<size_t>(i)], stage.max_seq_len);
            for (int32_t r = first; r < last; ++r) {
                const int64_t row = stage.begin + r;
                const int32_t pos = stage.seq_len[static_cast<size_t>(i)] - (last - first) + (r - first);
                EXPECT_EQ(b.positions[static_cast<size_t>(row)], pos) << "row " << row;
                const Sequence& seq = *seq_of_row[static_cast<size_t>(row)];
                EXPECT_EQ(b.tokens[static_cast<size_t>(row)], seq.tokenAt(pos));
                for (int64_t j = 0; j < W; ++j) {
                    const int32_t want =
                        j < static_cast<int64_t>(seq.blocks.size()) ? seq.blocks[static_cast<size_t>(j)] : -1;
                    EXPECT_EQ(stage.block_tables[static_cast<size_t>(i * W + j)], want);
                }
                const int32_t slot =
                    seq.blocks[static_cast<size_t>(pos / block_size)] * static_cast<int32_t>(block_size) +
                    pos % static_cast<int32_t>(block_size);
                EXPECT_EQ(b.slot_mapping[static_cast<size_t>(row)], slot) << "row " << row;
            }
        }
        next_row = stage.end;
    }
    EXPECT_EQ(next_row, b.numTokens());
}

TEST(ForwardBatch, DboSplitsInsideAChunk) {
    auto seq = makeSequence(1, 10, {7, 2, 5});
    ScheduledStep step;
    step.chunks.push_back({seq.get(), 0, 10, true});
    ForwardBatchOptions options;
    options.block_size = 4;
    options.block_table_width = 4;
    options.dual_batch_overlap = true;
    const ForwardBatch b = buildForwardBatch(step, options);
    ASSERT_EQ(b.stages.size(), 2u);
    // No chunk boundary inside the step: split at half, both halves one chunk of the same sequence.
    EXPECT_EQ(b.stages[0].begin, 0);
    EXPECT_EQ(b.stages[0].end, 5);
    EXPECT_EQ(b.stages[0].q_start, (std::vector<int32_t>{0, 5}));
    EXPECT_EQ(b.stages[0].seq_len, (std::vector<int32_t>{5}));
    EXPECT_EQ(b.stages[1].begin, 5);
    EXPECT_EQ(b.stages[1].end, 10);
    EXPECT_EQ(b.stages[1].q_start, (std::vector<int32_t>{0, 5}));
    EXPECT_EQ(b.stages[1].seq_len, (std::vector<int32_t>{10}));
    EXPECT_EQ(b.stages[1].block_tables, (std::vector<int32_t>{7, 2, 5, -1}));
    EXPECT_EQ(b.slot_mapping, (std::vector<int32_t>{28, 29, 30, 31, 8, 9, 10, 11, 20, 21}));
    EXPECT_EQ(b.logits_rows, (std::vector<int32_t>{9}));
    expectConsistent(b, step, options.block_size);
}

TEST(ForwardBatch, MixedDecodeAndPrefillChunksInOneStage) {
    auto a = makeSequence(1, 7, {3, 0});  // decode of its 7th token
    auto b = makeSequence(2, 9, {1, 4});  // the first prefill chunk, not the last
    auto c = makeSequence(3, 8, {6, 2});  // the end of its prefill
    ScheduledStep step;
    step.chunks.push_back({a.get(), 6, 7, true});
    step.chunks.push_back({b.get(), 0, 5, false});
    step.chunks.push_back({c.get(), 2, 8, true});
    ForwardBatchOptions options;
    options.block_size = 4;
    options.block_table_width = 3;
    const ForwardBatch batch = buildForwardBatch(step, options);
    ASSERT_EQ(batch.stages.size(), 1u);
    const StageChunks& s = batch.stages[0];
    EXPECT_EQ(s.q_start, (std::vector<int32_t>{0, 1, 6, 12}));
    EXPECT_EQ(s.seq_len, (std::vector<int32_t>{7, 5, 8}));
    EXPECT_EQ(s.max_query_len, 6);
    EXPECT_EQ(s.max_seq_len, 8);
    EXPECT_EQ(s.block_tables, (std::vector<int32_t>{3, 0, -1, 1, 4, -1, 6, 2, -1}));
    EXPECT_EQ(batch.logits_rows, (std::vector<int32_t>{0, 11}));
    expectConsistent(batch, step, options.block_size);
}

TEST(ForwardBatch, DboPrefersANearChunkBoundaryAndLeavesTinyStepsUnsplit) {
    auto a = makeSequence(1, 3, {0});
    auto b = makeSequence(2, 6, {1, 2});
    ScheduledStep step;
    step.chunks.push_back({a.get(), 0, 3, true});
    step.chunks.push_back({b.get(), 0, 6, true});
    ForwardBatchOptions options;
    options.block_size = 4;
    options.block_table_width = 2;
    options.dual_batch_overlap = true;
    const ForwardBatch split = buildForwardBatch(step, options);
    ASSERT_EQ(split.stages.size(), 2u);
    EXPECT_EQ(split.stages[0].end, 3);  // the boundary 1 from half of T = 9 (within T / 4), not 4 inside b
    EXPECT_EQ(split.stages[0].numChunks(), 1);
    EXPECT_EQ(split.stages[1].numChunks(), 1);
    expectConsistent(split, step, options.block_size);

    ScheduledStep one;
    one.chunks.push_back({a.get(), 2, 3, true});
    const ForwardBatch tiny = buildForwardBatch(one, options);
    ASSERT_EQ(tiny.stages.size(), 2u);  // always two stages under DBO
    EXPECT_EQ(tiny.stages[0].end, 1);
    EXPECT_EQ(tiny.stages[1].begin, 1);
    EXPECT_EQ(tiny.stages[1].end, 1);
    EXPECT_EQ(tiny.stages[1].numChunks(), 0);
    EXPECT_EQ(tiny.stages[1].q_start, (std::vector<int32_t>{0}));
}

TEST(ForwardBatch, RandomStepsFollowTheChunkContract) {
    std::mt19937 rng(11);
    constexpr int64_t kBlockSize = 4;
    constexpr int64_t kWidth = 8;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<std::unique_ptr<Sequence>> seqs;
        ScheduledStep step;
        const int num = std::uniform_int_distribution<int>(1, 5)(rng);
        int32_t next_block = 0;
        for (int i = 0; i < num; ++i) {
            const int64_t end = std::uniform_int_distribution<int64_t>(1, kBlockSize * kWidth)(rng);
            const int64_t begin = std::uniform_int_distribution<int64_t>(0, end - 1)(rng);
            std::vector<int32_t> blocks;
            for (int64_t b = 0; b < (end + kBlockSize - 1) / kBlockSize; ++b) blocks.push_back(next_block++);
            seqs.push_back(makeSequence(i, end, blocks));
            step.chunks.push_back({seqs.back().get(), begin, end, rng() % 2 == 0});
        }
        ForwardBatchOptions options;
        options.block_size = kBlockSize;
        options.block_table_width = kWidth;
        options.dual_batch_overlap = trial % 2 == 0;
        const ForwardBatch b = buildForwardBatch(step, options);
        ASSERT_EQ(b.stages.size(), options.dual_batch_overlap ? 2u : 1u);
        expectConsistent(b, step, kBlockSize);
        if (HasFatalFailure()) return;
    }
}

TEST(StepBuffers, UploadsToFixedAddresses) {
    CpuOps ops;
    StepLimits limits{16, 4, 3, 64, 4, {}};
    StepBuffers buffers(ops, limits);
    auto a = makeSequence(1, 6, {2, 0});
    auto b = makeSequence(2, 3, {1});
    ForwardBatchOptions options;
    options.block_size = 4;
    options.block_table_width = 3;
    options.dual_batch_overlap = true;

    ScheduledStep first;
    first.chunks.push_back({a.get(), 0, 6, true});
    first.chunks.push_back({b.get(), 0, 3, true});
    const ForwardBatch batch = buildForwardBatch(first, options);
    const StepTensors t = buffers.upload(batch);
    auto values = [](const core::Tensor& x) {
        EXPECT_TRUE(x.device().isCpu());
        EXPECT_EQ(x.dtype(), core::DType::kI32);
        return std::vector<int32_t>(x.data<int32_t>(), x.data<int32_t>() + x.numel());
    };
    EXPECT_EQ(values(t.tokens), batch.tokens);
    EXPECT_EQ(values(t.positions), batch.positions);
    EXPECT_EQ(values(t.slot_mapping), batch.slot_mapping);
    EXPECT_EQ(values(t.logits_rows), batch.logits_rows);
    EXPECT_EQ(values(t.num_valid), std::vector<int32_t>{9});
    EXPECT_FALSE(t.padded);
    ASSERT_EQ(t.stages.size(), 2u);
    for (size_t s = 0; s < 2; ++s) {
        EXPECT_EQ(t.stages[s].begin, batch.stages[s].begin);
        EXPECT_EQ(t.stages[s].end, batch.stages[s].end);
        EXPECT_EQ(values(t.stages[s].chunks.q_start), batch.stages[s].q_start);
        EXPECT_EQ(values(t.stages[s].chunks.seq_len), batch.stages[s].seq_len);
        EXPECT_EQ(values(t.stages[s].chunks.block_tables), batch.stages[s].block_tables);
        EXPECT_EQ(t.stages[s].chunks.block_tables.shape(), (core::Shape{batch.stages[s].numChunks(), 3}));
        EXPECT_EQ(t.stages[s].chunks.max_query_len, batch.stages[s].max_query_len);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.stages[s].chunks.q_start.rawData()) % 64, 0u);
    }

    // A differently shaped step lands at the same addresses.
    ScheduledStep second;
    second.chunks.push_back({a.get(), 5, 6, true});
    const StepTensors u = buffers.upload(buildForwardBatch(second, options));
    EXPECT_EQ(u.tokens.rawData(), t.tokens.rawData());
    EXPECT_EQ(u.slot_mapping.rawData(), t.slot_mapping.rawData());
    EXPECT_EQ(u.stages[0].chunks.seq_len.rawData(), t.stages[0].chunks.seq_len.rawData());
    EXPECT_EQ(u.stages[1].chunks.block_tables.rawData(), t.stages[1].chunks.block_tables.rawData());
    EXPECT_EQ(values(u.tokens), std::vector<int32_t>{105});
}

TEST(StepBuffers, RefusesStepsBeyondTheLimits) {
    CpuOps ops;
    StepBuffers buffers(ops, StepLimits{4, 2, 2, 64, 4, {}});
    auto a = makeSequence(1, 6, {0, 1});
    ScheduledStep step;
    step.chunks.push_back({a.get(), 0, 6, true});
    ForwardBatchOptions options;
    options.block_size = 4;
    options.block_table_width = 2;
    EXPECT_THROW(buffers.upload(buildForwardBatch(step, options)), core::Error);  // 6 tokens > 4
}

}  // namespace
}  // namespace afd::attention
