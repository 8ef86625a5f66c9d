// `afd bench serve`'s load run end to end against a fake OpenAI streaming server (http::HttpServer in the test) with
// fixed token timing: counts, token totals, throughput arithmetic, latencies, failures, timeouts and interrupts.
#include "lab/serve/load_run.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <limits>
#include <memory>
#include <thread>

#include "http/http_server.h"
#include "lab/serve/serve_report.h"

namespace afd::lab {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr auto kFirstTokenDelay = milliseconds(30);
constexpr auto kChunkGap = milliseconds(5);
constexpr int32_t kFailingId = 1000;  // a prompt starting with it is answered 400
constexpr int32_t kHangingId = 1001;  // a prompt starting with it never gets a token

// Streams max_tokens tokens, two per chunk, then the usage chunk and [DONE].
http::HttpReply completions(const http::HttpRequest& request) {
    const json body = json::parse(request.body);
    const auto ids = body["prompt"].get<std::vector<int32_t>>();
    if (ids.front() == kFailingId) return http::HttpReply::error(400, "prompt refused by the fake server");
    const int64_t max_tokens = body["max_tokens"];
    const bool with_ids = body.value("return_token_ids", false);
    const bool hang = ids.front() == kHangingId;
    const auto prompt_tokens = static_cast<int64_t>(ids.size());
    return http::HttpReply::eventStream([=](http::StreamWriter& writer) {
        if (hang) {
            while (writer.connected()) std::this_thread::sleep_for(milliseconds(10));
            return;
        }
        std::this_thread::sleep_for(kFirstTokenDelay);
        for (int64_t sent = 0; sent < max_tokens;) {
            const int64_t n = std::min<int64_t>(2, max_tokens - sent);
            json choice{{"index", 0}, {"text", std::string(static_cast<size_t>(n), 'x')}};
            if (with_ids) choice["token_ids"] = std::vector<int>(static_cast<size_t>(n), 7);
            if (!writer.writeEvent(json{{"choices", json::array({choice})}}.dump())) return;
            sent += n;
            if (sent < max_tokens) std::this_thread::sleep_for(kChunkGap);
        }
        writer.writeEvent(json{{"choices", json::array()},
                               {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", max_tokens}}}}
                              .dump());
        writer.writeEvent("[DONE]");
    });
}

class LoadRunTest : public ::testing::Test {
protected:
    void SetUp() override {
        http::HttpServerOptions options;
        options.name = "fake OpenAI server";
        options.num_threads = 32;
        server_ = std::make_unique<http::HttpServer>(options);
        server_->addRoute("POST", "/v1/completions", completions);
        ASSERT_TRUE(server_->start().isOk());
        options_.port = server_->port();
        options_.request_rate = std::numeric_limits<double>::infinity();
        options_.request_timeout = milliseconds(5000);
    }

    // Prompts of `input_len` tokens starting with `first_id` (else their index), asking for `output_len` tokens.
    void addPrompts(int n, int64_t input_len, int64_t output_len, int32_t first_id = -1) {
        for (int i = 0; i < n; ++i) {
            BenchPrompt p;
            p.ids.assign(static_cast<size_t>(input_len), 3);
            p.ids[0] = first_id >= 0 ? first_id : static_cast<int32_t>(prompts_.size());
            p.input_len = input_len;
            p.output_len = output_len;
            prompts_.push_back(p);
            bodies_.push_back(*requestBody(p, body_options_));
        }
    }

    std::unique_ptr<http::HttpServer> server_;
    LoadRunOptions options_;
    RequestBodyOptions body_options_;
    std::vector<BenchPrompt> prompts_;
    std::vector<std::string> bodies_;
};

TEST_F(LoadRunTest, CountsTokensAndDerivesThroughputAndLatencies) {
    addPrompts(12, 20, 9);
    options_.max_concurrency = 4;
    const LoadRunResult run = runLoad(bodies_, prompts_, options_);
    ASSERT_EQ(run.records.size(), 12u);
    EXPECT_FALSE(run.interrupted);
    EXPECT_EQ(run.not_sent, 0);
    EXPECT_GE(run.max_concurrency_seen, 1);
    EXPECT_LE(run.max_concurrency_seen, 4);
    for (const RequestRecord& r : run.records) {
        ASSERT_TRUE(r.success) << r.error;
        EXPECT_EQ(r.output_tokens, 9);
        EXPECT_EQ(r.input_len, 20);
        EXPECT_TRUE(r.usage_reported);
        EXPECT_GE(r.ttft_s, 0.025);
        EXPECT_GT(r.e2e_s, r.ttft_s);
        ASSERT_EQ(r.itl_s.size(), 8u);  // the second token of the first chunk counts as a gap of 0
        EXPECT_EQ(r.itl_s[0], 0.0);
        for (size_t i = 1; i < r.itl_s.size(); ++i) EXPECT_GT(r.itl_s[i], 0.0);
    }
    // Three waves of four at most: each request takes 30 ms + 4 gaps of 5 ms.
    EXPECT_GE(run.duration_s, 3 * 0.045);

    const std::vector<double> percentiles = {50, 99};
    const ServeSummary s = summarize(run, percentiles);
    EXPECT_EQ(s.completed, 12);
    EXPECT_EQ(s.failed, 0);
    EXPECT_EQ(s.total_input_tokens, 12 * 20);
    EXPECT_EQ(s.total_output_tokens, 12 * 9);
    EXPECT_DOUBLE_EQ(s.request_throughput, 12 / run.duration_s);
    EXPECT_DOUBLE_EQ(s.output_throughput, 12 * 9 / run.duration_s);
    EXPECT_DOUBLE_EQ(s.total_token_throughput, 12 * 29 / run.duration_s);
    EXPECT_GE(s.latency_ms.at("ttft").median, 25.0);
    EXPECT_GT(s.latency_ms.at("tpot").mean, 0.0);
    EXPECT_GE(s.latency_ms.at("e2el").percentiles[1], s.latency_ms.at("e2el").median);
    // TPOT is the mean ITL of a request: both come from the same decode time.
    EXPECT_NEAR(s.latency_ms.at("itl").mean, s.latency_ms.at("tpot").mean, 0.25 * s.latency_ms.at("tpot").mean);

    const std::string text = formatSummary(s, kLatencyMetrics, percentiles);
    EXPECT_NE(text.find("Successful requests:                     12"), std::string::npos) << text;
    EXPECT_NE(text.find("P99 ITL (ms):"), std::string::npos) << text;
    const json j = json::parse(resultJson(ServeRunInfo{}, s, run, percentiles));
    EXPECT_EQ(j["completed"], 12);
    EXPECT_EQ(j["requests"].size(), 12u);
    EXPECT_TRUE(j.contains("p99_tpot_ms"));
    EXPECT_TRUE(j.contains("median_e2el_ms"));
}

TEST_F(LoadRunTest, WithoutTokenIdsChunksCountOneAndUsageGivesTheTotal) {
    body_options_.return_token_ids = false;
    addPrompts(3, 5, 6);
    const LoadRunResult run = runLoad(bodies_, prompts_, options_);
    for (const RequestRecord& r : run.records) {
        ASSERT_TRUE(r.success) << r.error;
        EXPECT_EQ(r.output_tokens, 6);
        EXPECT_EQ(r.itl_s.size(), 2u);  // three chunks
    }
}

TEST_F(LoadRunTest, FailuresAreCountedWithTheFirstMessage) {
    addPrompts(4, 8, 3);
    addPrompts(3, 8, 3, kFailingId);
    const ServeSummary s = summarize(runLoad(bodies_, prompts_, options_), {99});
    EXPECT_EQ(s.completed, 4);
    EXPECT_EQ(s.failed, 3);
    EXPECT_EQ(s.total_output_tokens, 4 * 3);
    EXPECT_NE(s.first_error.find("HTTP 400"), std::string::npos) << s.first_error;
    EXPECT_NE(s.first_error.find("refused by the fake server"), std::string::npos) << s.first_error;
}

TEST_F(LoadRunTest, AHangingRequestFailsAtItsTimeout) {
    addPrompts(2, 8, 3);
    addPrompts(2, 8, 3, kHangingId);
    options_.request_timeout = milliseconds(300);
    const auto start = std::chrono::steady_clock::now();
    const ServeSummary s = summarize(runLoad(bodies_, prompts_, options_), {99});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
    EXPECT_EQ(s.completed, 2);
    EXPECT_EQ(s.failed, 2);
    EXPECT_NE(s.first_error.find("300 ms"), std::string::npos) << s.first_error;  // the client's or the run's bound
}

TEST_F(LoadRunTest, ADeadServerFailsEveryRequest) {
    addPrompts(5, 8, 3);
    server_->stop();
    const ServeSummary s = summarize(runLoad(bodies_, prompts_, options_), {99});
    EXPECT_EQ(s.completed, 0);
    EXPECT_EQ(s.failed, 5);
    EXPECT_FALSE(s.first_error.empty());
    EXPECT_EQ(s.total_token_throughput, 0.0);
}

TEST_F(LoadRunTest, AnInterruptEndsTheRunWithWhatFinished) {
    addPrompts(2, 8, 3, kHangingId);
    addPrompts(50, 8, 3);
    options_.request_rate = 10;  // the later prompts would take seconds to arrive
    std::atomic<bool> interrupt{false};
    options_.interrupt = &interrupt;
    std::jthread interrupter([&] {
        std::this_thread::sleep_for(milliseconds(300));
        interrupt = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const LoadRunResult run = runLoad(bodies_, prompts_, options_);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
    EXPECT_TRUE(run.interrupted);
    const ServeSummary s = summarize(run, {99});
    EXPECT_GE(s.cancelled, 2);  // the hanging ones (and any other in flight then)
    EXPECT_GT(s.not_sent, 40);
    EXPECT_EQ(s.completed + s.failed + s.cancelled + s.not_sent, 52);
    EXPECT_EQ(s.failed, 0);
}

}  // namespace
}  // namespace afd::lab
