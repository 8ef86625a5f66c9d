// The engine's serving API on one thread: per-step tokens, abort, and a failed step that fails only its sequences
// (or, when the backend cannot recover, every sequence and the engine's health).
#include <gtest/gtest.h>

#include <map>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/local_mlp_backend.h"
#include "attention/serving_test_util.h"

namespace afd::attention {
namespace {

using test::SteeredBackend;

SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

// A CPU engine over the fixture whose backend the test steers.
struct SteeredEngine {
    explicit SteeredEngine(const EngineOptions& options)
        : model(test::loadHostModel(test::fixtureModelDir())),
          backend(std::make_unique<LocalMlpBackend>(model.config, model.weights)),
          engine(model.config, model.weights, ops, backend, options) {}
    int64_t freeBlocks() const { return engine.kvCache().allocator().numFree(); }
    int64_t numBlocks() const { return engine.kvCache().allocator().numBlocks(); }

    test::HostModel model;
    CpuOps ops;
    SteeredBackend backend;
    Engine engine;
};

const std::vector<int32_t> kPromptA = {3, 17, 99, 250, 7, 42, 311, 5};
const std::vector<int32_t> kPromptB = {11, 12, 13};
const std::vector<int32_t> kPromptC = {200, 201, 202, 203, 204};

TEST(EngineServing, StepTokensConcatenateToEachFinishedOutput) {
    SteeredEngine e(test::testEngineOptions(64, 5));  // chunked prefill: some steps sample nothing for a sequence
    const std::vector<std::vector<int32_t>> prompts = {kPromptA, kPromptB, kPromptC};
    const std::vector<SamplingParams> params = {greedy(6), greedy(9), greedy(3)};
    const auto alone = test::idsAlone(e.model, prompts, params, test::testEngineOptions());
    std::map<int64_t, size_t> index_of;
    for (size_t i = 0; i < prompts.size(); ++i) index_of[*e.engine.addRequest(prompts[i], params[i])] = i;
    std::vector<std::vector<int32_t>> streamed(prompts.size());
    std::vector<std::vector<int32_t>> finished(prompts.size());
    while (e.engine.hasWork()) {
        StepOutput out = e.engine.runStep();
        ASSERT_TRUE(out.error.isOk()) << out.error.toString();
        EXPECT_GT(out.num_tokens, 0);
        for (const auto& t : out.tokens) streamed[index_of.at(t.id)].push_back(t.token);
        for (const auto& seq : out.finished) {
            EXPECT_EQ(seq->finish_reason, FinishReason::kLength);
            finished[index_of.at(seq->id)] = seq->output;
        }
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(streamed[i], finished[i]) << "prompt " << i;
        EXPECT_EQ(finished[i], alone[i]) << "prompt " << i;
    }
    EXPECT_EQ(e.freeBlocks(), e.numBlocks());
}

TEST(EngineServing, AbortOfAWaitingAndOfARunningRequestFreesTheirBlocks) {
    EngineOptions options = test::testEngineOptions(1, 4);  // one sequence at a time, prefill in chunks of 4
    options.block_size = 4;
    SteeredEngine e(options);
    const int64_t running = *e.engine.addRequest(kPromptA, greedy(20));
    const int64_t waiting = *e.engine.addRequest(kPromptB, greedy(20));
    ASSERT_TRUE(e.engine.runStep().error.isOk());  // the first 4 prompt tokens of `running`
    EXPECT_EQ(e.engine.scheduler().numRunning(), 1);
    EXPECT_EQ(e.engine.scheduler().numWaiting(), 1);
    EXPECT_EQ(e.freeBlocks(), e.numBlocks() - 1);

    auto w = e.engine.abort(waiting);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->finish_reason, FinishReason::kAborted);
    EXPECT_EQ(w->status, SequenceStatus::kFinished);
    EXPECT_TRUE(w->output.empty());
    EXPECT_TRUE(w->blocks.empty());
    EXPECT_EQ(e.engine.scheduler().numWaiting(), 0);

    ASSERT_TRUE(e.engine.runStep().error.isOk());  // the prompt's last 4 tokens: the first sample, a second block
    ASSERT_TRUE(e.engine.runStep().error.isOk());
    EXPECT_EQ(e.freeBlocks(), e.numBlocks() - 3);  // 9 positions computed, in blocks of 4
    auto r = e.engine.abort(running);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->finish_reason, FinishReason::kAborted);
    EXPECT_EQ(r->output.size(), 2u);
    EXPECT_EQ(e.freeBlocks(), e.numBlocks());
    EXPECT_FALSE(e.engine.hasWork());
    EXPECT_EQ(e.engine.abort(running), nullptr);  // no longer there
    EXPECT_EQ(e.engine.abort(12345), nullptr);

    // The freed blocks serve the next request, which gets the ids it gets alone.
    const auto alone = test::idsAlone(e.model, {kPromptC}, {greedy(7)}, options);
    ASSERT_TRUE(e.engine.addRequest(kPromptC, greedy(7)).isOk());
    std::vector<std::unique_ptr<Sequence>> done;
    while (e.engine.hasWork()) {
        auto step = e.engine.step();
        ASSERT_TRUE(step.isOk()) << step.status().toString();
        for (auto& seq : *step) done.push_back(std::move(seq));
    }
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0]->output, alone[0]);
    EXPECT_EQ(e.freeBlocks(), e.numBlocks());
}

TEST(EngineServing, AFailedStepFailsOnlyItsSequencesAndTheEngineGoesOn) {
    const EngineOptions options = test::testEngineOptions(2, 2048);  // A and B run, C waits
    SteeredEngine e(options);
    const auto alone = test::idsAlone(e.model, {kPromptC, kPromptA}, {greedy(5), greedy(4)}, options);
    const int64_t a = *e.engine.addRequest(kPromptA, greedy(8));
    const int64_t b = *e.engine.addRequest(kPromptB, greedy(8));
    const int64_t c = *e.engine.addRequest(kPromptC, greedy(5));
    ASSERT_TRUE(e.engine.runStep().error.isOk());
    e.backend.failNextStep();
    StepOutput failed = e.engine.runStep();
    ASSERT_FALSE(failed.error.isOk());
    EXPECT_NE(failed.error.message().find("injected failure"), std::string::npos) << failed.error.toString();
    EXPECT_TRUE(failed.tokens.empty());
    ASSERT_EQ(failed.finished.size(), 2u);
    for (const auto& seq : failed.finished) {
        EXPECT_TRUE(seq->id == a || seq->id == b);
        EXPECT_EQ(seq->finish_reason, FinishReason::kError);
        EXPECT_EQ(seq->error.code(), core::StatusCode::kInternal);
        EXPECT_EQ(seq->output.size(), 1u);  // the token of the step before
    }
    EXPECT_TRUE(e.engine.health().isOk());
    // C was waiting: it runs now, and a request added after the failure succeeds too.
    const int64_t d = *e.engine.addRequest(kPromptA, greedy(4));
    std::map<int64_t, std::vector<int32_t>> done;
    while (e.engine.hasWork()) {
        StepOutput out = e.engine.runStep();
        ASSERT_TRUE(out.error.isOk()) << out.error.toString();
        for (auto& seq : out.finished) done[seq->id] = seq->output;
    }
    EXPECT_EQ(done[c], alone[0]);
    EXPECT_EQ(done[d], alone[1]);
    EXPECT_EQ(e.freeBlocks(), e.numBlocks());
    EXPECT_TRUE(e.engine.finish().isOk());
    EXPECT_EQ(e.backend.lastPlansSeen(), 1);
}

TEST(EngineServing, ABackendThatCannotRecoverFailsEverySequenceAndTheEngineTurnsUnhealthy) {
    SteeredEngine e(test::testEngineOptions(1, 2048));  // A runs, B waits
    e.backend.setRecoverable(false);
    ASSERT_TRUE(e.engine.addRequest(kPromptA, greedy(8)).isOk());
    ASSERT_TRUE(e.engine.addRequest(kPromptB, greedy(8)).isOk());
    ASSERT_TRUE(e.engine.runStep().error.isOk());
    e.backend.failNextStep();
    StepOutput out = e.engine.runStep();
    ASSERT_FALSE(out.error.isOk());
    ASSERT_EQ(out.finished.size(), 2u);  // the step's sequence and the waiting one
    for (const auto& seq : out.finished) EXPECT_EQ(seq->finish_reason, FinishReason::kError);
    EXPECT_EQ(out.finished[1]->error.code(), core::StatusCode::kInternal);  // the step error's code, the reason too
    EXPECT_NE(out.finished[1]->error.message().find("cannot recover"), std::string::npos);
    EXPECT_FALSE(e.engine.health().isOk());
    EXPECT_FALSE(e.engine.hasWork());
    EXPECT_EQ(e.freeBlocks(), e.numBlocks());
    auto refused = e.engine.addRequest(kPromptC, greedy(2));
    ASSERT_FALSE(refused.isOk());
    EXPECT_NE(refused.status().message().find("cannot recover"), std::string::npos);
    // The backend is mid-step: finish sends nothing.
    EXPECT_TRUE(e.engine.finish().isOk());
    EXPECT_EQ(e.backend.lastPlansSeen(), 0);
}

TEST(EngineServing, CheckRequestNamesTheFieldOrLimit) {
    SteeredEngine e(test::testEngineOptions());
    SamplingParams p = greedy(4);
    EXPECT_TRUE(e.engine.checkRequest(kPromptA, p).isOk());
    EXPECT_NE(e.engine.checkRequest(std::vector<int32_t>{1, 384}, p).message().find("384"), std::string::npos);
    EXPECT_NE(e.engine.checkRequest(std::vector<int32_t>{}, p).message().find("empty"), std::string::npos);
    p.max_tokens = 600;
    EXPECT_NE(e.engine.checkRequest(kPromptA, p).message().find("max_model_len"), std::string::npos);
    p = greedy(4);
    p.temperature = -1.0f;
    EXPECT_NE(e.engine.checkRequest(kPromptA, p).message().find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace afd::attention
