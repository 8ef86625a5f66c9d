// EngineLoop: the engine on its own thread, fed from many threads. Greedy ids under concurrency equal each request's
// ids alone; abort, failed steps, exceptions and shutdown end exactly the requests they should, with their blocks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <latch>
#include <random>
#include <thread>

#include "attention/cpu_ops.h"
#include "attention/engine_loop.h"
#include "attention/local_mlp_backend.h"
#include "attention/serving_test_util.h"

namespace afd::attention {
namespace {

using namespace std::chrono_literals;
using test::SteeredBackend;

SamplingParams greedy(int64_t max_tokens, bool ignore_eos = true) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = ignore_eos;
    return p;
}

// The engine of `dir` on the CPU behind a steered backend, and its loop (destroyed first, with the gate open).
struct LoopHarness {
    LoopHarness(const std::string& dir, const EngineOptions& options, EngineLoopOptions loop_options = {})
        : model(test::loadHostModel(dir)),
          backend(std::make_unique<LocalMlpBackend>(model.config, model.weights)),
          engine(model.config, model.weights, ops, backend, options),
          loop(std::make_unique<EngineLoop>(engine, std::move(loop_options))) {}
    ~LoopHarness() {
        backend.openGate();
        loop.reset();
    }
    std::shared_ptr<RequestStream> submit(std::vector<int32_t> prompt, const SamplingParams& params) {
        auto stream = loop->submit({std::move(prompt), params});
        AFD_CHECK_OK(stream.status());
        return *stream;
    }

    test::HostModel model;
    CpuOps ops;
    SteeredBackend backend;
    Engine engine;
    std::unique_ptr<EngineLoop> loop;
};

// A stream read with next() to its end.
struct Streamed {
    std::vector<int32_t> ids;  // every output's new tokens, concatenated
    RequestOutput last;
    int outputs = 0;
    bool ended = false;
};

// `read_before`: the tokens an earlier next() returned.
Streamed readToEnd(RequestStream& stream, std::vector<int32_t> read_before = {},
                   std::chrono::milliseconds timeout = 60s) {
    Streamed s;
    s.ids = std::move(read_before);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!stream.drained() && std::chrono::steady_clock::now() < deadline) {
        auto out = stream.next(10ms);
        if (!out) continue;
        ++s.outputs;
        s.ids.insert(s.ids.end(), out->new_token_ids.begin(), out->new_token_ids.end());
        EXPECT_EQ(out->num_output_tokens, static_cast<int64_t>(s.ids.size()));
        EXPECT_EQ(out->num_prompt_tokens, stream.numPromptTokens());
        s.last = std::move(*out);
    }
    s.ended = stream.drained();
    return s;
}

const std::vector<int32_t> kPromptA = {3, 17, 99, 250, 7, 42, 311, 5};
const std::vector<int32_t> kPromptB = {11, 12, 13};
const std::vector<int32_t> kPromptC = {200, 201, 202, 203, 204};

class EngineLoopModels : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineLoopModels, ConcurrentSubmitsFromEightThreadsGiveEachRequestItsIdsAlone) {
    const std::string dir = GetParam() == "fixture" ? test::fixtureModelDir() : test::generatedModelDir();
    constexpr int kThreads = 8;
    constexpr int kPerThread = 3;
    const test::HostModel model = test::loadHostModel(dir);
    // Small steps and few sequence slots: prefills are chunked, decodes mix with them, requests wait their turn.
    const EngineOptions options = test::testEngineOptions(6, 48);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<SamplingParams> params;
    std::mt19937 rng(GetParam() == "fixture" ? 1 : 2);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config.vocab_size - 1));
    for (int i = 0; i < kThreads * kPerThread; ++i) {
        std::vector<int32_t> prompt(static_cast<size_t>(1 + (i * 7) % 40));
        for (auto& t : prompt) t = token(rng);
        prompts.push_back(std::move(prompt));
        params.push_back(greedy(1 + (i * 5) % 24, i % 2 == 0));
    }
    std::vector<int32_t> hf_ids;
    if (GetParam() == "fixture") {
        // HF transformers' own greedy ids for its prompt, as one of the requests.
        std::ifstream in(std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/expected.json");
        const auto expected = nlohmann::json::parse(in);
        prompts[5] = expected["prompt_ids"].get<std::vector<int32_t>>();
        hf_ids = expected["greedy_new_ids"].get<std::vector<int32_t>>();
        params[5] = greedy(static_cast<int64_t>(hf_ids.size()));
    }
    const auto alone = test::idsAlone(model, prompts, params, options);
    if (!hf_ids.empty()) {
        EXPECT_EQ(alone[5], hf_ids);
    }

    std::atomic<int> steps_seen{0};
    EngineLoopOptions loop_options;
    loop_options.on_step = [&](const StepReport& r, const Engine&) {
        EXPECT_TRUE(r.error.isOk());
        EXPECT_GT(r.num_tokens, 0);
        EXPECT_LE(r.num_tokens, 48);
        ++steps_seen;
    };
    LoopHarness h(dir, options, std::move(loop_options));
    std::vector<Streamed> streamed(prompts.size());
    std::vector<std::optional<RequestResult>> results(prompts.size());
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            start.arrive_and_wait();
            std::vector<std::pair<size_t, std::shared_ptr<RequestStream>>> mine;
            for (int k = 0; k < kPerThread; ++k) {
                const size_t i = static_cast<size_t>(t * kPerThread + k);
                auto stream = h.loop->submit({prompts[i], params[i]});
                ASSERT_TRUE(stream.isOk()) << stream.status().toString();
                mine.emplace_back(i, *stream);
            }
            for (auto& [i, stream] : mine) {
                streamed[i] = readToEnd(*stream);
                results[i] = stream->result();
            }
        });
    }
    for (auto& th : threads) th.join();
    uint64_t prompt_tokens = 0, generated = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(streamed[i].ended && results[i].has_value()) << "request " << i << " did not end";
        EXPECT_EQ(results[i]->output_ids, alone[i]) << "request " << i;
        EXPECT_EQ(streamed[i].ids, results[i]->output_ids) << "request " << i;
        EXPECT_EQ(results[i]->prompt_ids, prompts[i]);
        EXPECT_TRUE(streamed[i].last.finished);
        EXPECT_TRUE(results[i]->error.isOk());
        const auto reason = results[i]->finish_reason;
        EXPECT_TRUE(reason == FinishReason::kLength || reason == FinishReason::kStop) << "request " << i;
        prompt_tokens += prompts[i].size();
        generated += results[i]->output_ids.size();
    }
    const EngineLoopStats stats = h.loop->stats();
    EXPECT_EQ(stats.num_finished, prompts.size());
    EXPECT_EQ(stats.num_running, 0);
    EXPECT_EQ(stats.num_waiting, 0);
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    EXPECT_EQ(stats.prompt_tokens, prompt_tokens);
    EXPECT_EQ(stats.generation_tokens, generated);
    EXPECT_EQ(stats.num_steps, static_cast<uint64_t>(steps_seen.load()));
    EXPECT_TRUE(h.loop->health().isOk());
}

INSTANTIATE_TEST_SUITE_P(Models, EngineLoopModels, ::testing::Values("fixture", "generated"),
                         [](const auto& info) { return info.param; });

TEST(EngineLoop, AbortOfAWaitingAndOfARunningRequestFreesTheirBlocks) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions(1, 2048));  // one sequence at a time
    h.backend.closeGate();
    auto running = h.submit(kPromptA, greedy(50));
    h.backend.allowSteps(1);
    auto first = running->next(10s);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->new_token_ids.size(), 1u);
    auto waiting = h.submit(kPromptB, greedy(50));
    ASSERT_TRUE(h.backend.waitStepsBegun(2, 10s));  // the engine thread holds step 2 at the gate
    const EngineLoopStats before = h.loop->stats();
    EXPECT_EQ(before.num_running, 1);
    EXPECT_EQ(before.num_waiting, 1);
    EXPECT_LT(before.num_free_kv_blocks, before.num_kv_blocks);
    EXPECT_TRUE(h.loop->abort(waiting->id()));
    EXPECT_TRUE(h.loop->abort(running->id()));
    h.backend.allowSteps(1);  // step 2 ends; the aborts are taken before step 3

    auto w = waiting->waitResult(10s);
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(w->finish_reason, FinishReason::kAborted);
    EXPECT_TRUE(w->output_ids.empty());
    auto r = running->waitResult(10s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->finish_reason, FinishReason::kAborted);
    EXPECT_EQ(r->output_ids.size(), 2u);
    const Streamed rest = readToEnd(*running, first->new_token_ids);
    EXPECT_EQ(rest.ids, r->output_ids);
    EXPECT_TRUE(rest.last.finished);
    EXPECT_EQ(rest.last.finish_reason, FinishReason::kAborted);
    EXPECT_EQ(rest.last.num_output_tokens, 2);
    const EngineLoopStats after = h.loop->stats();
    EXPECT_EQ(after.num_free_kv_blocks, after.num_kv_blocks);
    EXPECT_EQ(after.num_aborted, 2u);
    EXPECT_EQ(after.num_running, 0);
    EXPECT_EQ(after.num_waiting, 0);
    EXPECT_FALSE(h.loop->abort(running->id()));  // ended
    EXPECT_FALSE(h.loop->abort(999));

    h.backend.openGate();
    const auto alone = test::idsAlone(h.model, {kPromptC}, {greedy(6)}, test::testEngineOptions(1, 2048));
    auto next = h.submit(kPromptC, greedy(6));
    auto result = next->waitResult(30s);
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->output_ids, alone[0]);
}

TEST(EngineLoop, ASlowReaderGetsEveryTokenInOneOutput) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions());
    auto stream = h.submit(kPromptA, greedy(9));
    auto result = stream->waitResult(30s);
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->output_ids.size(), 9u);
    auto out = stream->next(0ms);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->new_token_ids, result->output_ids);
    EXPECT_TRUE(out->finished);
    EXPECT_EQ(out->finish_reason, FinishReason::kLength);
    EXPECT_EQ(out->num_prompt_tokens, static_cast<int64_t>(kPromptA.size()));
    EXPECT_EQ(out->num_output_tokens, 9);
    EXPECT_TRUE(stream->drained());
    EXPECT_FALSE(stream->next(1s).has_value());  // at once: the stream has ended
}

TEST(EngineLoop, AFailedStepFailsOnlyItsRequestsAndLaterRequestsSucceed) {
    const EngineOptions options = test::testEngineOptions(2, 2048);  // two run, the third waits
    LoopHarness h(test::fixtureModelDir(), options);
    const auto alone = test::idsAlone(h.model, {kPromptC, kPromptB}, {greedy(5), greedy(7)}, options);
    h.backend.closeGate();
    auto a = h.submit(kPromptA, greedy(8));
    auto b = h.submit(kPromptB, greedy(8));
    auto w = h.submit(kPromptC, greedy(5));
    h.backend.allowSteps(2);  // A and B have sampled (in one step or two)
    ASSERT_TRUE(h.backend.waitStepsBegun(3, 10s));
    h.backend.failNextStep();
    h.backend.allowSteps(1);
    for (auto* stream : {&a, &b}) {
        auto r = (*stream)->waitResult(10s);
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->finish_reason, FinishReason::kError);
        EXPECT_NE(r->error.message().find("injected failure"), std::string::npos) << r->error.toString();
        const Streamed s = readToEnd(**stream);
        EXPECT_EQ(s.ids, r->output_ids);
        EXPECT_EQ(s.last.finish_reason, FinishReason::kError);
    }
    EXPECT_TRUE(h.loop->health().isOk());
    h.backend.openGate();
    auto later = h.submit(kPromptB, greedy(7));
    auto rw = w->waitResult(30s);
    auto rl = later->waitResult(30s);
    ASSERT_TRUE(rw && rl);
    EXPECT_EQ(rw->finish_reason, FinishReason::kLength);
    EXPECT_EQ(rw->output_ids, alone[0]);
    EXPECT_EQ(rl->output_ids, alone[1]);
    const EngineLoopStats stats = h.loop->stats();
    EXPECT_EQ(stats.num_failed, 2u);
    EXPECT_EQ(stats.num_finished, 2u);
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

TEST(EngineLoop, ShutdownWithRequestsInFlightEndsThemWithAnErrorInBoundedTime) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions(2, 2048));
    h.backend.setStepDelay(5ms);  // 400 tokens take seconds: they are in flight when the loop stops
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : {kPromptA, kPromptB, kPromptC, kPromptA}) streams.push_back(h.submit(p, greedy(400)));
    ASSERT_TRUE(streams[0]->next(10s).has_value());
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(h.loop->stop(5s));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    for (const auto& s : streams) {
        ASSERT_TRUE(s->finished());
        const RequestResult r = *s->result();
        EXPECT_EQ(r.finish_reason, FinishReason::kError);
        EXPECT_EQ(r.error.code(), core::StatusCode::kCancelled) << r.error.toString();
        EXPECT_LT(r.output_ids.size(), 400u);
    }
    const EngineLoopStats stats = h.loop->stats();
    EXPECT_EQ(stats.num_failed, 4u);
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    EXPECT_EQ(h.loop->health().code(), core::StatusCode::kCancelled);
    auto refused = h.loop->submit({kPromptB, greedy(2)});
    ASSERT_FALSE(refused.isOk());
    EXPECT_EQ(refused.status().code(), core::StatusCode::kCancelled);
    EXPECT_TRUE(h.loop->stop(1s));  // idempotent
}

TEST(EngineLoop, StopIsBoundedWhileAStepIsStuckAndJoinsOnceItEnds) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions());
    h.backend.closeGate();
    auto stream = h.submit(kPromptA, greedy(50));
    ASSERT_TRUE(h.backend.waitStepsBegun(1, 10s));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(h.loop->stop(200ms));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_FALSE(stream->finished());
    h.backend.openGate();
    EXPECT_TRUE(h.loop->stop(10s));
    auto r = stream->result();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->finish_reason, FinishReason::kError);
    EXPECT_EQ(r->output_ids.size(), 1u);  // the stuck step finished; no step after the stop
}

TEST(EngineLoop, AnExceptionInAStepEndsEveryRequestAndIsSurfaced) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions(1, 2048));
    h.backend.closeGate();
    auto a = h.submit(kPromptA, greedy(20));
    auto queued = h.submit(kPromptB, greedy(20));  // waits: one sequence at a time
    h.backend.allowSteps(1);
    ASSERT_TRUE(a->next(10s).has_value());
    ASSERT_TRUE(h.backend.waitStepsBegun(2, 10s));
    h.backend.failNextStep(/*throw_instead=*/true);
    h.backend.allowSteps(1);
    for (auto* s : {&a, &queued}) {
        auto r = (*s)->waitResult(10s);
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->finish_reason, FinishReason::kError);
        EXPECT_EQ(r->error.code(), core::StatusCode::kInternal);
        EXPECT_NE(r->error.message().find("injected exception"), std::string::npos) << r->error.toString();
    }
    EXPECT_EQ(h.loop->error().code(), core::StatusCode::kInternal);
    EXPECT_NE(h.loop->error().message().find("injected exception"), std::string::npos);
    EXPECT_EQ(h.loop->health().code(), core::StatusCode::kInternal);
    auto refused = h.loop->submit({kPromptC, greedy(2)});
    ASSERT_FALSE(refused.isOk());
    EXPECT_EQ(refused.status().code(), core::StatusCode::kInternal);
    const EngineLoopStats stats = h.loop->stats();
    EXPECT_EQ(stats.num_failed, 2u);
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    h.backend.openGate();
    EXPECT_TRUE(h.loop->stop(5s));
}

TEST(EngineLoop, RefusesBadRequestsAtSubmitNamingTheField) {
    LoopHarness h(test::fixtureModelDir(), test::testEngineOptions());
    auto vocab = h.loop->submit({{1, 384}, greedy(4)});
    ASSERT_FALSE(vocab.isOk());
    EXPECT_EQ(vocab.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(vocab.status().message().find("384"), std::string::npos);
    auto too_long = h.loop->submit({kPromptA, greedy(600)});
    ASSERT_FALSE(too_long.isOk());
    EXPECT_NE(too_long.status().message().find("max_model_len"), std::string::npos);
    SamplingParams bad = greedy(4);
    bad.top_p = 0.0f;
    auto top_p = h.loop->submit({kPromptA, bad});
    ASSERT_FALSE(top_p.isOk());
    EXPECT_NE(top_p.status().message().find("top_p"), std::string::npos);
    EXPECT_FALSE(h.loop->abort(0));  // nothing was queued
    EXPECT_EQ(h.loop->stats().num_failed, 0u);
    EXPECT_TRUE(h.loop->health().isOk());
}

}  // namespace
}  // namespace afd::attention
