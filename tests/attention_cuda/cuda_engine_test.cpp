// The dense GPU engine (CudaOps, the CUDA MLP backend, decode CUDA graphs) on the HF fixture
// (tests/data/qwen3-moe-tiny): transformers' greedy ids and prompt logits, eager and with graphs; batching,
// chunked prefill and preemption change no ids; graph replay gives the ids of eager steps (padded buckets, batches
// above the ladder's cap); seeded sampling depends on nothing else in the batch. Skips without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

#include "attention/graph_batches.h"
#include "attention_cuda/engine_test_util.h"

namespace afd::attention::test {
namespace {

class CudaEngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!haveGpu()) return;
        host_ = new HostModel(loadHostModel(kTinyDir + "/model"));
        device_ = new model::ModelWeights(uploadToGpu(*host_));
    }
    static void TearDownTestSuite() {
        delete device_;
        delete host_;
        device_ = nullptr;
        host_ = nullptr;
    }
    void SetUp() override { AFD_SKIP_WITHOUT_GPU(); }

    static EngineOptions options() {
        EngineOptions o;
        o.scheduler.max_model_len = 512;
        return o;
    }
    static RunOutput gpu(const std::vector<Request>& requests, const EngineOptions& o, bool alone = false) {
        return runOnGpu(host_->config, *device_, requests, o, alone);
    }

    static HostModel* host_;
    static model::ModelWeights* device_;
};

HostModel* CudaEngineTest::host_ = nullptr;
model::ModelWeights* CudaEngineTest::device_ = nullptr;

std::vector<std::vector<int32_t>> randomPrompts(int count, int min_len, int max_len, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> len(min_len, max_len);
    std::uniform_int_distribution<int> token(0, vocab - 1);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(count));
    for (auto& p : prompts) {
        p.resize(static_cast<size_t>(len(rng)));
        for (auto& t : p) t = token(rng);
    }
    return prompts;
}

TEST_F(CudaEngineTest, ReproducesTransformersGreedyIdsAndLogitsEagerAndWithGraphs) {
    std::ifstream in(kTinyDir + "/expected.json");
    const auto expected = nlohmann::json::parse(in);
    const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
    const auto want_ids = expected["greedy_new_ids"].get<std::vector<int32_t>>();
    const auto want_logits = expected["prompt_last_logits_fp32"].get<std::vector<double>>();
    for (const bool eager : {true, false}) {
        SCOPED_TRACE(eager ? "eager" : "graphs");
        EngineOptions o = options();
        o.enforce_eager = eager;
        const RunOutput out = gpu(greedyRequests({prompt}, static_cast<int64_t>(want_ids.size())), o);
        EXPECT_EQ(out.ids[0], want_ids);
        EXPECT_LT(relativeL2(out.prompt_logits[0], want_logits), 2e-2);
        if (eager) {
            EXPECT_TRUE(out.graph_sizes.empty());
            EXPECT_EQ(out.graph_replays, 0u);
        } else {
            // min(max_num_seqs 64, max_num_batched_tokens 2048) caps the default ladder.
            EXPECT_EQ(out.graph_sizes, defaultGraphBatchSizes(64));
            // The prefill runs eagerly; every decode step after it replays the batch-1 graph.
            EXPECT_EQ(out.eager_steps, 1u);
            EXPECT_EQ(out.graph_replays, want_ids.size() - 1);
        }
    }
}

TEST_F(CudaEngineTest, SixtyFourBatchedSequencesGetTheIdsEachGetsAlone) {
    const auto requests = greedyRequests(randomPrompts(64, 1, 48, 384, 7), 8);
    const RunOutput alone = gpu(requests, options(), true);
    const RunOutput batched = gpu(requests, options());
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(batched.ids[i], alone.ids[i]) << "prompt " << i;
        EXPECT_EQ(batched.ids[i].size(), 8u);
    }
    EXPECT_GT(batched.graph_replays, 0u);
    // Eager too, where every step is a prefill, a mixed step or a decode of the batch's own size.
    EngineOptions eager = options();
    eager.enforce_eager = true;
    const RunOutput batched_eager = gpu(requests, eager);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(batched_eager.ids[i], alone.ids[i]) << "prompt " << i;
}

TEST_F(CudaEngineTest, ChunkedPrefillGivesTheIdsOfOneShotPrefill) {
    const auto requests = greedyRequests(randomPrompts(12, 10, 24, 384, 11), 8);
    // Chunks and mixed steps take other kernels (and other roundings) than one-shot prefill and decode-only steps: a
    // prompt whose routing has a near-tie (engine_test_util.h) cannot tell the two apart.
    const std::vector<float> gaps = referenceRouterGaps(host_->config, host_->weights, requests, options());
    const RunOutput one_shot = gpu(requests, options());
    EngineOptions chunked = options();
    chunked.scheduler.max_num_batched_tokens = 8;  // prompts in pieces of up to 8 tokens, decodes mixed in
    const RunOutput pieces = gpu(requests, chunked);
    int decidable = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
        if (gaps[i] < kDecidableRouterGap) continue;
        ++decidable;
        EXPECT_EQ(pieces.ids[i], one_shot.ids[i]) << "prompt " << i << " (router gap " << gaps[i] << ")";
    }
    EXPECT_GE(decidable, 1) << "no prompt without a routing near-tie";
    // Dual-batch overlap (two stages a step, always eager) changes nothing either.
    EngineOptions dbo = options();
    dbo.dual_batch_overlap = true;
    const RunOutput staged = gpu(requests, dbo);
    EXPECT_TRUE(staged.graph_sizes.empty());
    for (size_t i = 0; i < requests.size(); ++i) {
        if (gaps[i] >= kDecidableRouterGap) {
            EXPECT_EQ(staged.ids[i], one_shot.ids[i]) << "prompt " << i;
        }
    }
}

TEST_F(CudaEngineTest, PreemptionUnderKvPressureKeepsTheTokens) {
    // Prompts of one block each that grow into a second one: three sequences need six blocks by the end.
    const auto requests = greedyRequests(randomPrompts(3, 9, 13, 384, 13), 12);
    const RunOutput alone = gpu(requests, options(), true);
    EngineOptions tight = options();
    tight.block_size = 16;
    tight.num_kv_blocks = 4;  // all three admitted, then one is preempted when the others take their second block
    tight.scheduler.max_model_len = 64;
    const RunOutput pressed = gpu(requests, tight);
    EXPECT_GT(pressed.preemptions, 0);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(pressed.ids[i], alone.ids[i]) << "prompt " << i;
}

TEST_F(CudaEngineTest, GraphReplayGivesTheIdsOfEagerSteps) {
    // Requests that finish one after another, so the decode batch shrinks 7 → 1 through padded buckets (7 → 8,
    // 5 → 8, 3 → 4).
    std::vector<Request> requests = greedyRequests(randomPrompts(7, 3, 30, 384, 17), 1);
    for (size_t i = 0; i < requests.size(); ++i) requests[i].params.max_tokens = static_cast<int64_t>(4 + 3 * i);
    EngineOptions eager = options();
    eager.enforce_eager = true;
    const RunOutput want = gpu(requests, eager);
    EXPECT_EQ(want.graph_replays, 0u);
    const RunOutput graphs = gpu(requests, options());
    EXPECT_GT(graphs.graph_replays, 0u);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(graphs.ids[i], want.ids[i]) << "prompt " << i;
    // A cap below the batch: the 7-, 6- and 5-row decodes run eagerly, the smaller ones replay.
    EngineOptions capped = options();
    capped.cuda_graph_max_batch_size = 4;
    const RunOutput mixed = gpu(requests, capped);
    EXPECT_EQ(mixed.graph_sizes, (std::vector<int64_t>{1, 2, 4}));
    EXPECT_GT(mixed.graph_replays, 0u);
    EXPECT_GT(mixed.eager_steps, 1u);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(mixed.ids[i], want.ids[i]) << "prompt " << i;
    // An explicit ladder.
    EngineOptions ladder = options();
    ladder.cuda_graph_batch_sizes = {3, 8};
    const RunOutput custom = gpu(requests, ladder);
    EXPECT_EQ(custom.graph_sizes, (std::vector<int64_t>{3, 8}));
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(custom.ids[i], want.ids[i]) << "prompt " << i;
}

TEST_F(CudaEngineTest, SeededSamplingDependsOnNothingElseInTheBatch) {
    std::vector<Request> requests = greedyRequests(randomPrompts(6, 4, 24, 384, 19), 12);
    for (size_t i = 0; i < requests.size(); ++i) {
        requests[i].params.temperature = 0.9f;
        requests[i].params.top_k = i % 2 == 0 ? 0 : 40;
        requests[i].params.top_p = i % 3 == 0 ? 1.0f : 0.9f;
        requests[i].params.seed = 1000 + i;
    }
    requests[5].params.temperature = 0.0f;  // a greedy row among sampled ones
    const RunOutput alone = gpu(requests, options(), true);
    const RunOutput batched = gpu(requests, options());
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(batched.ids[i], alone.ids[i]) << "prompt " << i;
    // The draws follow the seed: another seed gives another continuation somewhere.
    std::vector<Request> reseeded = requests;
    for (auto& r : reseeded) r.params.seed += 77;
    const RunOutput other = gpu(reseeded, options());
    int differ = 0;
    for (size_t i = 0; i < 5; ++i) differ += other.ids[i] != batched.ids[i] ? 1 : 0;
    EXPECT_GT(differ, 0);
    EXPECT_EQ(other.ids[5], batched.ids[5]);
}

}  // namespace
}  // namespace afd::attention::test
