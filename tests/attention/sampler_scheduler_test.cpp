#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "attention/kv_cache.h"
#include "attention/sampler.h"
#include "attention/scheduler.h"

namespace afd::attention {
namespace {

TEST(Sampler, GreedyIsArgmax) {
    const std::vector<float> logits = {0.1f, 2.0f, 1.5f, 2.0f};
    std::mt19937_64 rng(1);
    EXPECT_EQ(sampleToken(logits.data(), 4, SamplingParams{}, rng), 1);
}

TEST(Sampler, SeededSamplingIsReproducibleAndFollowsTheDistribution) {
    const std::vector<float> logits = {0.0f, std::log(3.0f), -100.0f};  // p ≈ 1/4, 3/4, 0
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 42;
    std::map<int32_t, int> counts;
    std::mt19937_64 a(p.seed), b(p.seed);
    for (int i = 0; i < 4000; ++i) {
        const int32_t t = sampleToken(logits.data(), 3, p, a);
        EXPECT_EQ(t, sampleToken(logits.data(), 3, p, b));
        ++counts[t];
    }
    EXPECT_EQ(counts[2], 0);
    EXPECT_NEAR(counts[1] / 4000.0, 0.75, 0.04);
}

TEST(Sampler, TopKAndTopPCutTheTail) {
    const std::vector<float> logits = {3.0f, 2.9f, 0.0f, -1.0f};
    std::mt19937_64 rng(3);
    SamplingParams k1;
    k1.temperature = 1.0f;
    k1.top_k = 1;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sampleToken(logits.data(), 4, k1, rng), 0);
    SamplingParams nucleus;
    nucleus.temperature = 1.0f;
    nucleus.top_p = 0.6f;  // the two leading tokens hold ~0.9 of the mass; 0.6 needs both
    for (int i = 0; i < 200; ++i) EXPECT_LE(sampleToken(logits.data(), 4, nucleus, rng), 1);
}

TEST(SamplingParams, RangesAreChecked) {
    SamplingParams p;
    p.max_tokens = 0;
    EXPECT_NE(p.validate().message().find("max_tokens"), std::string::npos);
    p = {};
    p.temperature = -1;
    EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
    p = {};
    p.top_p = 1.5f;
    EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
}

std::unique_ptr<Sequence> seq(int64_t id, int prompt_len, int64_t max_tokens) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->prompt.assign(static_cast<size_t>(prompt_len), 1);
    s->params.max_tokens = max_tokens;
    return s;
}

TEST(Scheduler, ChunksPrefillWithinTheTokenBudgetAndRunsDecodesFirst) {
    BlockAllocator blocks(64);
    SchedulerOptions o;
    o.max_num_batched_tokens = 8;
    o.max_model_len = 128;
    Scheduler s(o, blocks, 4);
    ASSERT_TRUE(s.add(seq(0, 10, 4)).isOk());
    ASSERT_TRUE(s.add(seq(1, 3, 4)).isOk());
    ScheduledStep step = s.schedule();
    ASSERT_EQ(step.chunks.size(), 1u);  // 8 of sequence 0's 10 prompt tokens
    EXPECT_EQ(step.chunks[0].end - step.chunks[0].begin, 8);
    EXPECT_FALSE(step.chunks[0].sample);
    s.complete(step);
    step = s.schedule();
    ASSERT_EQ(step.chunks.size(), 2u);  // the rest of 0 (2 tokens, samples) and all of 1 (3 tokens)
    EXPECT_EQ(step.chunks[0].seq->id, 0);
    EXPECT_TRUE(step.chunks[0].sample);
    EXPECT_EQ(step.chunks[1].seq->id, 1);
    EXPECT_EQ(step.numTokens(), 5);
}

TEST(Scheduler, RefusesRequestsThatCanNeverFit) {
    BlockAllocator blocks(4);
    SchedulerOptions o;
    o.max_model_len = 64;
    Scheduler s(o, blocks, 4);
    EXPECT_NE(s.add(seq(0, 10, std::numeric_limits<int64_t>::max())).message().find("max_model_len"),
              std::string::npos);
    EXPECT_NE(s.add(seq(1, 10, 20)).message().find("KV blocks"), std::string::npos);  // 30 tokens > 16 slots
    EXPECT_NE(s.add(seq(2, 0, 2)).message().find("empty"), std::string::npos);
}

TEST(Scheduler, PreemptsTheNewestRunningSequenceWhenBlocksRunOut) {
    BlockAllocator blocks(3);
    SchedulerOptions o;
    o.max_model_len = 12;
    Scheduler s(o, blocks, 4);
    ASSERT_TRUE(s.add(seq(0, 4, 8)).isOk());
    ASSERT_TRUE(s.add(seq(1, 4, 8)).isOk());
    ScheduledStep step = s.schedule();  // both prefills: 2 blocks
    ASSERT_EQ(step.chunks.size(), 2u);
    for (auto& c : step.chunks) c.seq->output.push_back(7);
    s.complete(step);
    step = s.schedule();  // both decode at position 4: each needs a second block, only one is left
    ASSERT_EQ(step.chunks.size(), 1u);
    EXPECT_EQ(step.chunks[0].seq->id, 0);
    EXPECT_EQ(s.numPreemptions(), 1);
    EXPECT_EQ(s.numWaiting(), 1);
}

}  // namespace
}  // namespace afd::attention
