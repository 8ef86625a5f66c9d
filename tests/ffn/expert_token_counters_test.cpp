// The FFN rank's per-expert token counters: ExpertTokenCounters on its own, and the CPU compute's own count of the
// p2p routing (its MoE block must give what mlpBlockCpu gives, and count top_k experts per token and layer).
#include "ffn/expert_token_counters.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/check.h"
#include "core/prometheus_text.h"
#include "ffn/cpu_ffn_compute.h"
#include "kernels/mlp_block.h"
#include "kernels/router.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {
namespace {

TEST(ExpertTokenCounters, CountLocalIdsUnderTheModelsExpertIds) {
    core::MetricsRegistry metrics;
    ExpertTokenCounters counters(metrics, 4, 3);
    counters.addLocalIds(std::vector<int32_t>{0, -1, 2, 2, -1, 2});
    counters.addLocalIds(std::vector<int32_t>{});
    EXPECT_EQ(metrics.render(),
              "# HELP afd_ffn_expert_tokens_total Tokens routed to each expert of this rank (summed over layers).\n"
              "# TYPE afd_ffn_expert_tokens_total counter\n"
              "afd_ffn_expert_tokens_total{expert=\"4\"} 1\n"
              "afd_ffn_expert_tokens_total{expert=\"5\"} 0\n"
              "afd_ffn_expert_tokens_total{expert=\"6\"} 3\n");
    EXPECT_THROW(counters.addLocalIds(std::vector<int32_t>{3}), core::Error);
}

TEST(ExpertTokenCounters, AddTotalsTakesOnlyWhatIsNew) {
    core::MetricsRegistry metrics;
    ExpertTokenCounters counters(metrics, 0, 2);
    counters.addTotals(std::vector<uint64_t>{5, 0});
    counters.addTotals(std::vector<uint64_t>{5, 2});
    counters.addTotals(std::vector<uint64_t>{4, 2});  // never down
    const core::PrometheusText m = core::PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_ffn_expert_tokens_total", {{"expert", "0"}}), 5);
    EXPECT_EQ(m.sum("afd_ffn_expert_tokens_total", {{"expert", "1"}}), 2);
    EXPECT_THROW(counters.addTotals(std::vector<uint64_t>{1}), core::Error);
}

TEST(ExpertTokenCounters, ALaterOwnerOfTheSameSeriesDoesNotCountEarlierTotalsAgain) {
    // One compute's totals count from its start; the FFN service makes new counters (a new runner) per session.
    core::MetricsRegistry metrics;
    {
        ExpertTokenCounters first_session(metrics, 0, 2);
        first_session.addTotals(std::vector<uint64_t>{5, 1});
    }
    ExpertTokenCounters second_session(metrics, 0, 2);
    second_session.addTotals(std::vector<uint64_t>{5, 1});  // nothing new since the first session
    second_session.addTotals(std::vector<uint64_t>{7, 4});
    const core::PrometheusText m = core::PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_ffn_expert_tokens_total", {{"expert", "0"}}), 7);
    EXPECT_EQ(m.sum("afd_ffn_expert_tokens_total", {{"expert", "1"}}), 4);
}

TEST(CpuFfnCompute, P2pBlockCountsItsRoutingAndMatchesTheReferenceBlock) {
    const std::string dir = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
    const model::ModelConfig config = model::ModelConfig::fromFile(dir + "/config.json").value();
    auto checkpoint = model::Checkpoint::open(dir).value();
    const auto selection = model::WeightSelection::ffnRole(false, config, 0, config.num_experts);
    model::ModelWeights reference_weights = model::loadWeights(checkpoint, config, selection).value();
    CpuFfnCompute compute(config, model::loadWeights(checkpoint, config, selection).value());

    const int64_t T = 5, H = config.hidden_size, K = config.num_experts_per_tok;
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T * H));
    for (auto& v : x) v = dist(rng);
    std::vector<uint64_t> totals(static_cast<size_t>(config.num_experts), 7);
    ASSERT_TRUE(compute.routedTokenTotals(totals));
    EXPECT_EQ(totals, std::vector<uint64_t>(totals.size(), 0));

    std::vector<uint64_t> expected(totals.size(), 0);
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        std::vector<float> out(static_cast<size_t>(T * H), std::nanf(""));
        std::vector<float> reference(out.size(), std::nanf(""));
        ASSERT_TRUE(compute.mlpBlock(layer, T, x.data(), out.data()).isOk());
        const model::MlpLayerWeights& w = reference_weights.mlp[static_cast<size_t>(layer)];
        kernels::mlpBlockCpu(config, w, x.data(), T, reference.data());
        EXPECT_EQ(out, reference) << "layer " << layer;
        if (!config.isMoeLayer(layer)) continue;
        std::vector<int32_t> ids(static_cast<size_t>(T * K));
        std::vector<float> weights(ids.size());
        kernels::routerForwardCpu(kernels::routerParams(config, T, kernels::ActDType::kF32, x.data(),
                                                        w.router.data<core::Bf16>(), ids.data(), weights.data()));
        for (int32_t e : ids) ++expected[static_cast<size_t>(e)];
    }
    ASSERT_TRUE(compute.routedTokenTotals(totals));
    EXPECT_EQ(totals, expected);
    uint64_t sum = 0;
    for (uint64_t v : totals) sum += v;
    EXPECT_EQ(sum, static_cast<uint64_t>(T * K * config.num_hidden_layers));  // every tiny layer is MoE
}

}  // namespace
}  // namespace afd::ffn
