// The decode graphs' bucket ladder and padding (attention/graph_batches.h), and the engine options that pick them.
// Runs without a GPU (the capture itself is tested in tests/attention_cuda).
#include <gtest/gtest.h>

#include <vector>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/graph_batches.h"
#include "attention/step_buffers.h"

namespace afd::attention {
namespace {

TEST(GraphBatches, DefaultLadderEndsAtTheCap) {
    EXPECT_EQ(defaultGraphBatchSizes(1), std::vector<int64_t>{1});
    EXPECT_EQ(defaultGraphBatchSizes(5), (std::vector<int64_t>{1, 2, 4, 5}));
    EXPECT_EQ(defaultGraphBatchSizes(64), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64}));
    EXPECT_EQ(defaultGraphBatchSizes(100), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 100}));
    const std::vector<int64_t> big = defaultGraphBatchSizes(512);
    EXPECT_EQ(big.size(), 13u + 12u);  // 1 ... 128, then 160, 192, ..., 512
    EXPECT_EQ(big[12], 128);
    EXPECT_EQ(big[13], 160);
    EXPECT_EQ(big.back(), 512);
    const std::vector<int64_t> odd = defaultGraphBatchSizes(300);  // ..., 256, 288, then the cap
    ASSERT_EQ(odd.size(), 19u);
    EXPECT_EQ(odd[17], 288);
    EXPECT_EQ(odd[18], 300);
}

TEST(GraphBatches, BucketIsTheSmallestThatHolds) {
    const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 24};
    EXPECT_EQ(graphBucketFor(sizes, 1), 1);
    EXPECT_EQ(graphBucketFor(sizes, 3), 4);
    EXPECT_EQ(graphBucketFor(sizes, 8), 8);
    EXPECT_EQ(graphBucketFor(sizes, 17), 24);
    EXPECT_FALSE(graphBucketFor(sizes, 25).has_value());
    EXPECT_FALSE(graphBucketFor({}, 1).has_value());
}

ForwardBatch decodeBatch(int64_t rows, int64_t width) {
    ForwardBatch b;
    b.block_table_width = width;
    StageChunks stage;
    stage.q_start.push_back(0);
    for (int64_t r = 0; r < rows; ++r) {
        b.tokens.push_back(static_cast<int32_t>(10 + r));
        b.positions.push_back(static_cast<int32_t>(5 + r));
        b.slot_mapping.push_back(static_cast<int32_t>(100 + r));
        b.logits_rows.push_back(static_cast<int32_t>(r));
        stage.q_start.push_back(static_cast<int32_t>(r + 1));
        stage.seq_len.push_back(static_cast<int32_t>(6 + r));
        for (int64_t j = 0; j < width; ++j) stage.block_tables.push_back(j == 0 ? static_cast<int32_t>(r) : -1);
    }
    stage.end = rows;
    stage.max_query_len = 1;
    stage.max_seq_len = static_cast<int32_t>(5 + rows);
    b.stages.push_back(stage);
    return b;
}

TEST(GraphBatches, PaddingAddsEmptyDecodeChunks) {
    ForwardBatch b = decodeBatch(3, 2);
    ASSERT_TRUE(b.isDecodeOnly());
    padDecodeBatch(b, 5);
    EXPECT_TRUE(b.isDecodeOnly());
    EXPECT_EQ(b.numTokens(), 5);
    EXPECT_EQ(b.num_padding, 2);
    EXPECT_EQ(b.numValidTokens(), 3);
    EXPECT_EQ(b.tokens, (std::vector<int32_t>{10, 11, 12, 0, 0}));
    EXPECT_EQ(b.positions, (std::vector<int32_t>{5, 6, 7, 0, 0}));
    EXPECT_EQ(b.slot_mapping, (std::vector<int32_t>{100, 101, 102, -1, -1}));
    EXPECT_EQ(b.logits_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    const StageChunks& s = b.stages[0];
    EXPECT_EQ(s.end, 5);
    EXPECT_EQ(s.q_start, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(s.seq_len, (std::vector<int32_t>{6, 7, 8, 0, 0}));
    EXPECT_EQ(s.block_tables, (std::vector<int32_t>{0, -1, 1, -1, 2, -1, -1, -1, -1, -1}));
    EXPECT_EQ(s.max_seq_len, 8);  // the real chunks' bound is kept

    // The capture's batch: every row padding, with the bound the graph keeps.
    const ForwardBatch dummy = paddingDecodeBatch(4, 3, 512);
    EXPECT_TRUE(dummy.isDecodeOnly());
    EXPECT_EQ(dummy.numValidTokens(), 0);
    EXPECT_EQ(dummy.stages[0].max_seq_len, 512);
    EXPECT_EQ(dummy.stages[0].seq_len, (std::vector<int32_t>(4, 0)));
    EXPECT_EQ(dummy.stages[0].block_tables.size(), 12u);

    // Uploaded, the padded batch says how many rows are real.
    CpuOps ops;
    StepBuffers buffers(ops, StepLimits{8, 8, 2, 64, 16, {}});
    const StepTensors t = buffers.upload(b);
    EXPECT_TRUE(t.padded);
    EXPECT_EQ(t.num_valid.data<int32_t>()[0], 3);
    EXPECT_EQ(t.tokens.numel(), 5);
}

TEST(GraphBatches, PrefillAndTwoStageStepsAreNotDecodeOnly) {
    ForwardBatch b = decodeBatch(2, 1);
    b.stages[0].max_query_len = 2;
    EXPECT_FALSE(b.isDecodeOnly());
    b = decodeBatch(2, 1);
    b.logits_rows.pop_back();  // a chunk that does not sample
    EXPECT_FALSE(b.isDecodeOnly());
    b = decodeBatch(2, 1);
    b.stages.push_back(StageChunks{});
    EXPECT_FALSE(b.isDecodeOnly());
}

TEST(EngineOptions, GraphOptionsAreChecked) {
    EngineOptions options;
    EXPECT_TRUE(options.validate().isOk());
    options.cuda_graph_max_batch_size = -1;
    EXPECT_NE(options.validate().message().find("cuda_graph_max_batch_size"), std::string::npos);
    options.cuda_graph_max_batch_size = 0;
    options.cuda_graph_batch_sizes = {1, 4, 4};
    EXPECT_NE(options.validate().message().find("cuda_graph_batch_sizes"), std::string::npos);
    options.cuda_graph_batch_sizes = {0, 4};
    EXPECT_FALSE(options.validate().isOk());
    options.cuda_graph_batch_sizes = {1, 3, 9};
    EXPECT_TRUE(options.validate().isOk());
}

}  // namespace
}  // namespace afd::attention
