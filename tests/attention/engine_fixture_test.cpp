// The dense engine against HF transformers' own Qwen3-MoE outputs (tests/data/qwen3-moe-tiny/expected.json),
// and batch invariance: sequences batched together get the ids each gets alone.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/local_mlp_backend.h"
#include "attention/offline.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {
namespace {

const std::string kTinyDir = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny";

struct LoadedModel {
    model::ModelConfig config;
    model::Checkpoint checkpoint;
    model::ModelWeights weights;
};

LoadedModel loadTiny() {
    auto config = model::ModelConfig::fromFile(kTinyDir + "/model/config.json");
    EXPECT_TRUE(config.isOk()) << config.status().toString();
    auto checkpoint = model::Checkpoint::open(kTinyDir + "/model");
    EXPECT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    auto weights = model::loadWeights(*checkpoint, *config, model::WeightSelection::everything(*config));
    EXPECT_TRUE(weights.isOk()) << weights.status().toString();
    return {std::move(config).value(), std::move(checkpoint).value(), std::move(weights).value()};
}

std::vector<GenerationResult> generate(const LoadedModel& m, const std::vector<std::vector<int32_t>>& prompts,
                                       int64_t max_tokens, EngineOptions options = {}) {
    options.scheduler.max_model_len = 512;
    CpuOps ops;
    LocalMlpBackend backend(m.config, m.weights);
    Engine engine(m.config, m.weights, ops, backend, options);
    SamplingParams params;
    params.max_tokens = max_tokens;
    auto results = generateOffline(engine, prompts, params, true);
    EXPECT_TRUE(results.isOk()) << results.status.toString();
    return std::move(results.results);
}

TEST(EngineFixture, ReproducesTransformersGreedyIdsAndLogits) {
    std::ifstream in(kTinyDir + "/expected.json");
    const auto expected = nlohmann::json::parse(in);
    const LoadedModel m = loadTiny();
    const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
    const auto want_ids = expected["greedy_new_ids"].get<std::vector<int32_t>>();
    const auto want_logits = expected["prompt_last_logits_fp32"].get<std::vector<double>>();
    const auto results = generate(m, {prompt}, static_cast<int64_t>(want_ids.size()));
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].new_ids, want_ids);
    ASSERT_EQ(results[0].prompt_last_logits.size(), want_logits.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < want_logits.size(); ++i) {
        num += std::pow(results[0].prompt_last_logits[i] - want_logits[i], 2);
        den += want_logits[i] * want_logits[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4);
}

TEST(EngineFixture, BatchedSequencesOfDifferentLengthsMatchSingleRuns) {
    const LoadedModel m = loadTiny();
    const std::vector<std::vector<int32_t>> prompts = {
        {3, 17, 99, 250, 7, 42, 311, 5},
        {11},
        {200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214,
         215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228},
        {5, 6, 7}};
    std::vector<std::vector<int32_t>> alone;
    for (const auto& p : prompts) alone.push_back(generate(m, {p}, 10)[0].new_ids);
    // All at once, with small steps so prefill is chunked and decodes mix with prefills.
    EngineOptions options;
    options.scheduler.max_num_batched_tokens = 7;
    const auto batched = generate(m, prompts, 10, options);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(batched[i].new_ids, alone[i]) << "prompt " << i;
    // Dual-batch overlap (two stages per step) changes nothing either.
    options.dual_batch_overlap = true;
    options.scheduler.max_num_batched_tokens = 64;
    const auto staged = generate(m, prompts, 10, options);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(staged[i].new_ids, alone[i]) << "prompt " << i;
}

TEST(EngineFixture, PreemptionUnderKvPressureKeepsTokens) {
    const LoadedModel m = loadTiny();
    const std::vector<std::vector<int32_t>> prompts = {{3, 17, 99, 250, 7, 42, 311, 5}, {9, 8, 7, 6, 5}, {1, 2}};
    std::vector<std::vector<int32_t>> alone;
    for (const auto& p : prompts) alone.push_back(generate(m, {p}, 12)[0].new_ids);
    EngineOptions options;
    options.block_size = 4;
    options.num_kv_blocks = 6;  // 24 slots for up to 20 + 17 + 14 tokens: someone must be preempted
    CpuOps ops;
    LocalMlpBackend backend(m.config, m.weights);
    options.scheduler.max_model_len = 64;
    Engine engine(m.config, m.weights, ops, backend, options);
    SamplingParams params;
    params.max_tokens = 12;
    auto results = generateOffline(engine, prompts, params, false);
    ASSERT_TRUE(results.isOk()) << results.status.toString();
    EXPECT_GT(engine.scheduler().numPreemptions(), 0);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(results.results[i].new_ids, alone[i]) << "prompt " << i;
}

TEST(EngineFixture, RejectsBadRequests) {
    const LoadedModel m = loadTiny();
    CpuOps ops;
    LocalMlpBackend backend(m.config, m.weights);
    EngineOptions options;
    options.scheduler.max_model_len = 32;
    Engine engine(m.config, m.weights, ops, backend, options);
    SamplingParams params;
    params.max_tokens = 4;
    auto out_of_vocab = engine.addRequest({1, 384}, params);
    ASSERT_FALSE(out_of_vocab.isOk());
    EXPECT_NE(out_of_vocab.status().message().find("384"), std::string::npos);
    params.max_tokens = 40;
    auto too_long = engine.addRequest({1, 2}, params);
    ASSERT_FALSE(too_long.isOk());
    EXPECT_NE(too_long.status().message().find("max_model_len"), std::string::npos);
    params.max_tokens = 4;
    params.top_p = 0.0f;
    auto bad_top_p = engine.addRequest({1, 2}, params);
    ASSERT_FALSE(bad_top_p.isOk());
    EXPECT_NE(bad_top_p.status().message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace afd::attention
