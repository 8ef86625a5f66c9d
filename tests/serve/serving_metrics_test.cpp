// ServingMetrics: the request histograms and finish counters from RequestRecords, the engine stats at render time,
// the per-layer A2F/F2A histograms from step reports, and the FFN ranks' expert counters merged from their /metrics
// (a fake rank on loopback, and a rank that does not answer).
#include "serve/serving_metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/afd_processes.h"
#include "core/prometheus_text.h"
#include "http/http_server.h"

namespace afd::serve {
namespace {

using namespace std::chrono_literals;
using core::PrometheusText;
using LayerTiming = attention::MlpBackend::LayerTiming;

size_t occurrences(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

RequestRecord record(RequestEnd end, std::string endpoint = "completions") {
    RequestRecord r;
    r.endpoint = std::move(endpoint);
    r.end = end;
    r.arrival = RequestRecord::Clock::now();
    r.finished = r.arrival + 500ms;
    return r;
}

TEST(ServingMetrics, RequestRecordsFeedTheLatencyHistogramsAndFinishCounters) {
    ServingMetrics metrics;
    RequestRecord done = record(RequestEnd::kStop, "chat_completions");
    done.num_prompt_tokens = 5;
    done.num_output_tokens = 3;
    done.outputs = {{done.arrival + 100ms, 1}, {done.arrival + 300ms, 2}};
    metrics.onRequestDone(done);
    RequestRecord aborted = record(RequestEnd::kAborted, "chat_completions");  // left before any token
    metrics.onRequestDone(aborted);
    metrics.onRequestDone(record(RequestEnd::kRejected, "chat_completions"));
    metrics.onRequestDone(record(RequestEnd::kLength));

    const PrometheusText m = PrometheusText::parse(metrics.render());
    const std::vector<std::pair<std::string, std::string>> chat = {{"endpoint", "chat_completions"}};
    EXPECT_EQ(m.sum("afd_time_to_first_token_seconds_count", chat), 1);
    EXPECT_NEAR(m.sum("afd_time_to_first_token_seconds_sum", chat), 0.1, 1e-9);
    // The second output's 200 ms gap is spread over its two tokens.
    EXPECT_EQ(m.sum("afd_inter_token_latency_seconds_count", chat), 2);
    EXPECT_NEAR(m.sum("afd_inter_token_latency_seconds_sum", chat), 0.2, 1e-9);
    EXPECT_EQ(m.sum("afd_inter_token_latency_seconds_bucket", {{"endpoint", "chat_completions"}, {"le", "0.075"}}), 0);
    EXPECT_EQ(m.sum("afd_inter_token_latency_seconds_bucket", {{"endpoint", "chat_completions"}, {"le", "0.15"}}), 2);
    // Every request but the rejected one has an end-to-end latency and token counts.
    EXPECT_EQ(m.sum("afd_e2e_request_latency_seconds_count", chat), 2);
    EXPECT_NEAR(m.sum("afd_e2e_request_latency_seconds_sum", chat), 1.0, 1e-9);
    EXPECT_EQ(m.sum("afd_request_prompt_tokens_sum", chat), 5);
    EXPECT_EQ(m.sum("afd_request_generation_tokens_sum", chat), 3);
    EXPECT_EQ(m.sum("afd_request_generation_tokens_bucket", {{"endpoint", "chat_completions"}, {"le", "2"}}), 1);
    for (const auto& [reason, count] : std::vector<std::pair<std::string, double>>{
             {"stop", 1}, {"length", 0}, {"aborted", 1}, {"error", 0}, {"rejected", 1}}) {
        EXPECT_EQ(m.sum("afd_request_finished_total", {{"endpoint", "chat_completions"}, {"finished_reason", reason}}),
                  count)
            << reason;
    }
    EXPECT_EQ(m.sum("afd_request_success_total", chat), 1);
    EXPECT_EQ(m.sum("afd_request_success_total", {{"endpoint", "completions"}, {"finished_reason", "length"}}), 1);
    EXPECT_EQ(m.sum("afd_request_finished_total"), 4);
    // The series of both endpoints and every reason exist from the start; success counts stop and length only.
    EXPECT_EQ(m.series("afd_request_finished_total").size(), 10u);
    EXPECT_EQ(m.series("afd_request_success_total").size(), 4u);
}

TEST(ServingMetrics, EngineStatsAreReadAtEachRender) {
    ServingMetrics metrics;
    const std::string before = metrics.render();  // no source yet: zeros
    EXPECT_NE(before.find("afd_kv_blocks_total 0\n"), std::string::npos) << before;
    attention::EngineLoopStats stats;
    stats.num_running = 3;
    stats.num_waiting = 2;
    stats.num_kv_blocks = 100;
    stats.num_free_kv_blocks = 25;
    stats.prompt_tokens = 10;
    stats.generation_tokens = 5;
    stats.num_preemptions = 1;
    metrics.setStatsSource([&] { return stats; });
    PrometheusText m = PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_num_requests_running"), 3);
    EXPECT_EQ(m.sum("afd_num_requests_waiting"), 2);
    EXPECT_EQ(m.sum("afd_kv_blocks_total"), 100);
    EXPECT_EQ(m.sum("afd_kv_blocks_used"), 75);
    EXPECT_DOUBLE_EQ(m.sum("afd_kv_cache_usage_perc"), 0.75);
    EXPECT_EQ(m.sum("afd_prompt_tokens_total"), 10);
    EXPECT_EQ(m.sum("afd_generation_tokens_total"), 5);
    EXPECT_EQ(m.sum("afd_num_preemptions_total"), 1);
    stats.prompt_tokens = 15;
    stats.generation_tokens = 9;
    stats.num_free_kv_blocks = 100;
    stats.num_running = 0;
    m = PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_prompt_tokens_total"), 15);
    EXPECT_EQ(m.sum("afd_generation_tokens_total"), 9);
    EXPECT_EQ(m.sum("afd_num_preemptions_total"), 1);
    EXPECT_EQ(m.sum("afd_kv_blocks_used"), 0);
    EXPECT_EQ(m.sum("afd_num_requests_running"), 0);
}

TEST(ServingMetrics, StepsFeedTheLayerHistogramsOfCrossingLayersOnly) {
    ServingMetrics metrics;
    attention::StepReport report;
    report.num_tokens = 4;
    report.seconds = 0.002;
    metrics.onStep(report, std::span<const LayerTiming>{});  // the dense engine: no layer families
    std::string text = metrics.render();
    EXPECT_EQ(text.find("afd_layer_a2f_seconds"), std::string::npos);
    EXPECT_NE(text.find("afd_engine_steps_total 1\n"), std::string::npos) << text;

    std::vector<LayerTiming> layers(3);
    layers[1] = {.send_seconds = 0.001, .receive_seconds = 0.003, .num_crossings = 1};
    layers[2] = {.send_seconds = 0.0005, .receive_seconds = 0.00002, .num_crossings = 2};
    metrics.onStep(report, layers);
    metrics.onStep(report, layers);
    attention::StepReport failed = report;
    failed.error = core::peerLost("gone");
    metrics.onStep(failed, layers);  // partial figures: counted as a failed step only
    attention::StepReport idle;      // nothing scheduled
    metrics.onStep(idle, layers);

    text = metrics.render();
    const PrometheusText m = PrometheusText::parse(text);
    EXPECT_EQ(m.sum("afd_engine_steps_total"), 3);
    EXPECT_EQ(m.sum("afd_engine_failed_steps_total"), 1);
    EXPECT_EQ(m.sum("afd_engine_step_seconds_count"), 3);
    EXPECT_TRUE(m.series("afd_layer_a2f_seconds_count").size() == 2) << text;
    EXPECT_EQ(m.sum("afd_layer_a2f_seconds_count", {{"layer", "0"}}), 0);
    EXPECT_EQ(m.sum("afd_layer_a2f_seconds_count", {{"layer", "1"}}), 2);
    EXPECT_NEAR(m.sum("afd_layer_a2f_seconds_sum", {{"layer", "1"}}), 0.002, 1e-12);
    EXPECT_NEAR(m.sum("afd_layer_f2a_seconds_sum", {{"layer", "1"}}), 0.006, 1e-12);
    EXPECT_NEAR(m.sum("afd_layer_f2a_seconds_sum", {{"layer", "2"}}), 0.00004, 1e-12);
    EXPECT_EQ(m.sum("afd_layer_f2a_seconds_bucket", {{"layer", "2"}, {"le", "1e-05"}}), 0);
    EXPECT_EQ(m.sum("afd_layer_f2a_seconds_bucket", {{"layer", "2"}, {"le", "4e-05"}}), 2);
    EXPECT_EQ(occurrences(text, "# TYPE afd_layer_a2f_seconds histogram\n"), 1u);
}

TEST(ServingMetrics, MergesEachRanksExpertCountersAndMarksSilentRanksDown) {
    const std::string rank0 =
        "# HELP afd_ffn_steps_total Engine steps served.\n"
        "# TYPE afd_ffn_steps_total counter\n"
        "afd_ffn_steps_total 7\n"
        "# TYPE afd_ffn_expert_tokens_total counter\n"
        "afd_ffn_expert_tokens_total{expert=\"0\"} 12\n"
        "afd_ffn_expert_tokens_total{expert=\"1\"} 0\n"
        "afd_ffn_expert_tokens_total{expert=\"2\"} -3\n"  // a broken rank's values are left out
        "afd_ffn_expert_tokens_total 5\n"
        "afd_ffn_expert_tokens_total{expert=\"3\"} not_a_number\n";
    const std::string rank2 = "afd_ffn_expert_tokens_total{expert=\"9\"} 4.5e3\n";
    const std::string text = mergeFfnExpertMetrics({rank0, std::nullopt, rank2});
    EXPECT_EQ(text,
              "# HELP afd_ffn_rank_up Whether the FFN rank answered its /metrics (1) or not (0).\n"
              "# TYPE afd_ffn_rank_up gauge\n"
              "afd_ffn_rank_up{ffn_rank=\"0\"} 1\n"
              "afd_ffn_rank_up{ffn_rank=\"1\"} 0\n"
              "afd_ffn_rank_up{ffn_rank=\"2\"} 1\n"
              "# HELP afd_ffn_expert_tokens_total Tokens routed to each expert of an FFN rank (summed over layers).\n"
              "# TYPE afd_ffn_expert_tokens_total counter\n"
              "afd_ffn_expert_tokens_total{expert=\"0\",ffn_rank=\"0\"} 12\n"
              "afd_ffn_expert_tokens_total{expert=\"1\",ffn_rank=\"0\"} 0\n"
              "afd_ffn_expert_tokens_total{expert=\"9\",ffn_rank=\"2\"} 4500\n");
    EXPECT_EQ(mergeFfnExpertMetrics({}), "");
}

TEST(ServingMetrics, RenderAsksTheFfnRanksWithABoundedWait) {
    // Rank 0: a fake admin server; rank 1: a port nobody listens on; rank 2: a server that answers too late.
    http::HttpServer fake;
    fake.addRoute("GET", "/metrics", [](const http::HttpRequest&) {
        return http::HttpReply::text(200, "afd_ffn_expert_tokens_total{expert=\"5\"} 42\n");
    });
    ASSERT_TRUE(fake.start().isOk());
    http::HttpServer slow;
    slow.addRoute("GET", "/metrics", [](const http::HttpRequest&) {
        std::this_thread::sleep_for(1500ms);
        return http::HttpReply::text(200, "afd_ffn_expert_tokens_total{expert=\"6\"} 1\n");
    });
    ASSERT_TRUE(slow.start().isOk());
    const int closed = testing::freePort();
    ASSERT_GT(closed, 0);

    ServingMetricsOptions options;
    options.ffn_admin_ports = {fake.port(), closed, slow.port()};
    options.ffn_timeout = 300ms;
    ServingMetrics metrics(options);
    const auto start = std::chrono::steady_clock::now();
    const std::string text = metrics.render();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1200ms);  // the ranks are asked at once, each bounded
    const PrometheusText m = PrometheusText::parse(text);
    EXPECT_EQ(m.sum("afd_ffn_rank_up", {{"ffn_rank", "0"}}), 1);
    EXPECT_EQ(m.sum("afd_ffn_rank_up", {{"ffn_rank", "1"}}), 0);
    EXPECT_EQ(m.sum("afd_ffn_rank_up", {{"ffn_rank", "2"}}), 0);
    EXPECT_EQ(m.sum("afd_ffn_expert_tokens_total", {{"expert", "5"}, {"ffn_rank", "0"}}), 42);
    EXPECT_EQ(m.series("afd_ffn_expert_tokens_total").size(), 1u);
    // The serving families come first, each family once.
    EXPECT_LT(text.find("afd_engine_steps_total"), text.find("afd_ffn_rank_up"));
    EXPECT_EQ(occurrences(text, "# TYPE afd_ffn_expert_tokens_total counter\n"), 1u);
    slow.stop();
}

TEST(ServingMetrics, RecordsFromManyThreadsWhileRendering) {
    ServingMetrics metrics;
    constexpr int kThreads = 4;
    constexpr int kRequests = 500;
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
                for (int i = 0; i < kRequests; ++i) {
                    RequestRecord r = record(RequestEnd::kStop, t % 2 == 0 ? "completions" : "chat_completions");
                    r.outputs = {{r.arrival + 1ms, 1}, {r.arrival + 2ms, 1}};
                    metrics.onRequestDone(r);
                    if (i % 100 == 0) (void)metrics.render();
                }
            });
        }
    }
    const PrometheusText m = PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_request_success_total"), kThreads * kRequests);
    EXPECT_EQ(m.sum("afd_time_to_first_token_seconds_count"), kThreads * kRequests);
    EXPECT_EQ(m.sum("afd_inter_token_latency_seconds_count"), kThreads * kRequests);
}

}  // namespace
}  // namespace afd::serve
