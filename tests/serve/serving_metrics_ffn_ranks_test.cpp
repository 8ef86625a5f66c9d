// The FFN ranks' per-expert token counters, with CPU FFN ranks of the `afd` binary on loopback: after an attention
// rank's generation, every rank's /metrics holds one afd_ffn_expert_tokens_total series per expert it holds, and
// together they count every (token, MoE layer, top-k choice) once, in m2n (the frames' ids) and p2p (the rank's own
// router). ServingMetrics then merges the live ranks' series under an ffn_rank label.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "core/prometheus_text.h"
#include "model/model_config.h"
#include "serve/serving_metrics.h"

namespace afd::serve {
namespace {

using namespace std::chrono_literals;
using core::PrometheusText;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

void checkExpertCounters(bool m2n, int num_ffn) {
    auto config = model::ModelConfig::fromFile(kTiny + "/config.json");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < config->num_hidden_layers; ++l) moe_layers += config->isMoeLayer(l) ? 1 : 0;

    testing::TempDir dir;
    const std::string cfg = testing::afdConfigJson(1, num_ffn, m2n, testing::freePort());
    std::vector<testing::FfnProcess> ffn;
    for (int k = 0; k < num_ffn; ++k) ffn.push_back(testing::startFfn(dir.path(), kTiny, cfg, k, num_ffn));
    for (auto& f : ffn) ASSERT_GT(testing::waitAdminPort(f), 0) << testing::readText(f.log_path);
    testing::AttentionProcess attention =
        testing::startAttention(dir.path(), kTiny, cfg, 0, {"1,2,3,4,5", "7,8"}, 6, {"--ignore-eos"});
    ASSERT_EQ(attention.process.wait(60s), 0) << testing::readText(attention.log_path);

    double expert_tokens = 0.0;
    std::vector<int> ports;
    for (int k = 0; k < num_ffn; ++k) {
        const std::string text = testing::httpGet(ffn[k].admin_port, "/metrics").value_or("");
        const PrometheusText m = PrometheusText::parse(text);
        const auto series = m.series("afd_ffn_expert_tokens_total");
        // One series per expert the rank holds (m2n: its range; p2p: all), at bounded cardinality.
        ASSERT_EQ(series.size(), static_cast<size_t>(config->num_experts / num_ffn)) << text;
        EXPECT_EQ(series.front().label("expert"), std::to_string(k * config->num_experts / num_ffn));
        for (const auto& s : series) expert_tokens += s.value;
        // Every rank saw every step's tokens: each token picks top_k experts in each MoE layer.
        const double tokens = m.sum("afd_ffn_tokens_total");
        EXPECT_GT(tokens, 0);
        if (k == num_ffn - 1) {
            EXPECT_EQ(expert_tokens, tokens * static_cast<double>(moe_layers * config->num_experts_per_tok)) << text;
        }
        ports.push_back(ffn[k].admin_port);
    }

    ServingMetricsOptions options;
    options.ffn_admin_ports = ports;
    ServingMetrics metrics(options);
    const PrometheusText merged = PrometheusText::parse(metrics.render());
    EXPECT_EQ(merged.sum("afd_ffn_expert_tokens_total"), expert_tokens);
    for (int k = 0; k < num_ffn; ++k) {
        EXPECT_EQ(merged.sum("afd_ffn_rank_up", {{"ffn_rank", std::to_string(k)}}), 1);
        EXPECT_GT(merged.sum("afd_ffn_expert_tokens_total", {{"ffn_rank", std::to_string(k)}}), 0);
    }
    for (auto& f : ffn) {
        EXPECT_TRUE(testing::httpPostStop(f.admin_port));
        EXPECT_EQ(f.process.wait(20s), 0) << testing::readText(f.log_path);
    }
    // Stopped ranks show as down; /metrics still renders.
    const PrometheusText after = PrometheusText::parse(metrics.render());
    EXPECT_EQ(after.sum("afd_ffn_rank_up"), 0);
    EXPECT_TRUE(after.series("afd_ffn_expert_tokens_total").empty());
}

TEST(ServingMetricsFfnRanks, M2nRanksCountTheExpertIdsOfTheirFrames) { checkExpertCounters(/*m2n=*/true, 2); }

TEST(ServingMetricsFfnRanks, P2pRankCountsWhatItsRouterChose) { checkExpertCounters(/*m2n=*/false, 1); }

}  // namespace
}  // namespace afd::serve
