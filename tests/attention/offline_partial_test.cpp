// generateOffline when a step fails part-way: every prompt comes back with what it had generated, finish_reason
// kError for those cut short, and the step's error as the run's status.
#include <gtest/gtest.h>

#include <thread>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/local_mlp_backend.h"
#include "attention/offline.h"
#include "attention/serving_test_util.h"

namespace afd::attention {
namespace {

using namespace std::chrono_literals;

SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

struct SteeredEngine {
    SteeredEngine()
        : model(test::loadHostModel(test::fixtureModelDir())),
          backend(std::make_unique<LocalMlpBackend>(model.config, model.weights)),
          engine(model.config, model.weights, ops, backend, test::testEngineOptions()) {}

    test::HostModel model;
    CpuOps ops;
    test::SteeredBackend backend;
    Engine engine;
};

const std::vector<std::vector<int32_t>> kPrompts = {{3, 17, 99, 250, 7, 42, 311, 5}, {11, 12, 13}};

TEST(OfflinePartial, AFailedStepReturnsWhatEachPromptHadWithFinishReasonError) {
    SteeredEngine e;
    const auto alone = test::idsAlone(e.model, kPrompts, {greedy(40), greedy(40)}, test::testEngineOptions());
    e.backend.setRecoverable(false);  // as a lost FFN peer: the engine cannot go on
    e.backend.closeGate();
    e.backend.allowSteps(6);  // the prefill and five decode steps run; the seventh waits at the gate, then fails
    OfflineGeneration run;
    std::thread generation([&] { run = generateOffline(e.engine, kPrompts, greedy(40), false); });
    const bool waiting = e.backend.waitStepsBegun(7, 20s);
    e.backend.failNextStep();
    e.backend.openGate();
    generation.join();
    ASSERT_TRUE(waiting) << "the seventh step never began";

    ASSERT_FALSE(run.isOk());
    EXPECT_NE(run.status.message().find("injected failure"), std::string::npos) << run.status.toString();
    ASSERT_EQ(run.results.size(), kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        const GenerationResult& r = run.results[i];
        EXPECT_EQ(r.prompt_ids, kPrompts[i]);
        EXPECT_EQ(r.finish_reason, FinishReason::kError) << "prompt " << i;
        ASSERT_EQ(r.new_ids.size(), 6u) << "prompt " << i;  // one token per step that ran
        EXPECT_TRUE(std::equal(r.new_ids.begin(), r.new_ids.end(), alone[i].begin())) << "prompt " << i;
    }
}

TEST(OfflinePartial, APromptRefusedBeforeAnyStepReturnsNoResults) {
    SteeredEngine e;
    const std::vector<std::vector<int32_t>> prompts = {{3, 17}, {999999}};  // an id beyond the vocabulary
    const OfflineGeneration run = generateOffline(e.engine, prompts, greedy(4), false);
    EXPECT_EQ(run.status.code(), core::StatusCode::kInvalidArgument) << run.status.toString();
    EXPECT_TRUE(run.results.empty());
    EXPECT_EQ(e.backend.stepsBegun(), 0);
}

TEST(OfflinePartial, FinishedRunsReportLengthAndNoError) {
    SteeredEngine e;
    const OfflineGeneration run = generateOffline(e.engine, kPrompts, greedy(3), false);
    ASSERT_TRUE(run.isOk()) << run.status.toString();
    for (const auto& r : run.results) {
        EXPECT_EQ(r.finish_reason, FinishReason::kLength);
        EXPECT_EQ(r.new_ids.size(), 3u);
    }
}

}  // namespace
}  // namespace afd::attention
