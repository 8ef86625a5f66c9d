// The dense GPU engine served from its own thread: an AttentionRank on cuda:0 (the HF fixture, decode graphs on)
// behind its EngineLoop. Streams submitted from eight threads get the ids each request gets alone on the GPU engine,
// and an abort frees the request's blocks. Skips without a GPU.
#include <gtest/gtest.h>

#include <latch>
#include <random>
#include <thread>

#include "attention/attention_rank.h"
#include "attention_cuda/engine_test_util.h"

namespace afd::attention::test {
namespace {

using namespace std::chrono_literals;

ModelSource fixtureSource() {
    const std::string dir = kTinyDir + "/model";
    auto config = model::ModelConfig::fromFile(dir + "/config.json");
    AFD_CHECK_OK(config.status());
    auto checkpoint = model::Checkpoint::open(dir);
    AFD_CHECK_OK(checkpoint.status());
    ModelSource source;
    source.config = std::move(config).value();
    source.checkpoint.emplace(std::move(checkpoint).value());
    source.name = dir;
    return source;
}

TEST(CudaEngineLoop, ConcurrentStreamsOnTheGpuRankGetTheIdsEachGetsAloneAndAbortFreesBlocks) {
    AFD_SKIP_WITHOUT_GPU();
    constexpr int kThreads = 8;
    constexpr int kPerThread = 4;
    EngineOptions options;
    options.scheduler.max_model_len = 512;
    options.scheduler.max_num_seqs = 16;
    options.scheduler.max_num_batched_tokens = 64;  // chunked prefills beside graph-replayed decodes
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> len(1, 48);
    std::uniform_int_distribution<int> token(0, 383);
    std::vector<Request> requests;
    for (int i = 0; i < kThreads * kPerThread; ++i) {
        Request r;
        r.prompt.resize(static_cast<size_t>(len(rng)));
        for (auto& t : r.prompt) t = token(rng);
        r.params.max_tokens = 4 + i % 13;
        r.params.ignore_eos = true;
        requests.push_back(std::move(r));
    }
    const HostModel host = loadHostModel(kTinyDir + "/model");
    const model::ModelWeights device = uploadToGpu(host);
    const RunOutput alone = runOnGpu(host.config, device, requests, options, /*one_at_a_time=*/true);

    AttentionRankOptions o;
    o.device = core::Device::cuda(0);
    o.engine = options;
    o.gpu.gpu_memory_utilization = 0.5;
    auto rank = AttentionRank::create(fixtureSource(), std::move(o));
    ASSERT_TRUE(rank.isOk()) << rank.status().toString();
    EXPECT_FALSE((*rank)->engine().graphBatchSizes().empty());
    EngineLoop& loop = (*rank)->startLoop();
    std::vector<std::vector<int32_t>> streamed(requests.size());
    std::vector<std::optional<RequestResult>> results(requests.size());
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            start.arrive_and_wait();
            std::vector<std::pair<size_t, std::shared_ptr<RequestStream>>> mine;
            for (int k = 0; k < kPerThread; ++k) {
                const size_t i = static_cast<size_t>(t * kPerThread + k);
                auto s = loop.submit({requests[i].prompt, requests[i].params});
                ASSERT_TRUE(s.isOk()) << s.status().toString();
                mine.emplace_back(i, *s);
            }
            for (auto& [i, s] : mine) {
                const auto deadline = std::chrono::steady_clock::now() + 60s;
                while (!s->drained() && std::chrono::steady_clock::now() < deadline) {
                    if (auto out = s->next(10ms)) {
                        streamed[i].insert(streamed[i].end(), out->new_token_ids.begin(), out->new_token_ids.end());
                    }
                }
                results[i] = s->result();
            }
        });
    }
    for (auto& th : threads) th.join();
    for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_TRUE(results[i].has_value()) << "request " << i << " did not end";
        EXPECT_EQ(results[i]->finish_reason, FinishReason::kLength) << results[i]->error.toString();
        EXPECT_EQ(results[i]->output_ids, alone.ids[i]) << "request " << i;
        EXPECT_EQ(streamed[i], results[i]->output_ids) << "request " << i;
    }

    // A long request aborted mid-decode frees its blocks.
    auto s = loop.submit({requests[0].prompt, [] {
                              SamplingParams p;
                              p.max_tokens = 400;
                              p.ignore_eos = true;
                              return p;
                          }()});
    ASSERT_TRUE(s.isOk());
    ASSERT_TRUE((*s)->next(30s).has_value());
    EXPECT_TRUE(loop.abort((*s)->id()));
    auto aborted = (*s)->waitResult(30s);
    ASSERT_TRUE(aborted.has_value());
    EXPECT_EQ(aborted->finish_reason, FinishReason::kAborted);
    const EngineLoopStats stats = loop.stats();
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    EXPECT_EQ(stats.num_aborted, 1u);
    EXPECT_TRUE(loop.health().isOk());
    ASSERT_TRUE((*rank)->shutdown(30s).isOk());
    EXPECT_GT((*rank)->engine().numGraphReplays(), 0u);  // decode steps replayed graphs from the loop's thread
}

}  // namespace
}  // namespace afd::attention::test
