// The `afd serve` cells of docs/faults.md: the FFN rank that `afd serve` started gets SIGKILL, SIGTERM or SIGSTOP
// while a plain request and a streamed one are in flight. The plain request must get HTTP 503 with an error body,
// the stream an error event, both within the configured step timeout plus a margin (never a hang, never a request
// that ends as if it had succeeded); /health answers 503 and a SIGTERM then ends the server with exit 3 (a lost peer)
// naming the rank.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/afd_processes.h"
#include "common/build_slowdown.h"
#include "common/subprocess_util.h"
#include "core/child_process.h"
#include "core/prometheus_text.h"
#include "http/http_client.h"

namespace afd::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
constexpr int kStepTimeoutS = 2 * kBuildSlowdown;
constexpr auto kMargin = 4s * kBuildSlowdown;

std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> out;
    std::istringstream in(readText(fmt::format("/proc/{}/task/{}/children", pid, pid)));
    for (pid_t child; in >> child;) out.push_back(child);
    return out;
}

struct Outcome {
    int status = 0;  // HTTP status; 0 when the client failed
    std::string body;
    std::string error_event;    // a stream's error event's message
    std::string finish_reason;  // the last one a stream's chunks carried
    Clock::time_point ended;
};

json completionRequest(bool stream) {
    return {{"model", "tiny"},  {"prompt", {3, 17, 99, 250}}, {"max_tokens", 3000},      {"ignore_eos", true},
            {"temperature", 0}, {"stream", stream},           {"return_token_ids", true}};
}

Outcome plainCompletion(int port) {
    Outcome out;
    auto reply = http::httpRequest("127.0.0.1", port, "POST", "/v1/completions", completionRequest(false).dump(), 60s);
    out.ended = Clock::now();
    if (reply.isOk()) {
        out.status = reply->status;
        out.body = reply->body;
    } else {
        out.body = reply.status().message();
    }
    return out;
}

Outcome streamedCompletion(int port, std::atomic<bool>& first_chunk) {
    Outcome out;
    http::HttpClientOptions options;
    options.timeout = 60s;
    http::HttpClient client("127.0.0.1", port, options);
    auto reply = client.streamEvents(
        "POST", "/v1/completions", completionRequest(true).dump(), [&](const http::SseEvent& event) {
            if (event.data == "[DONE]") return false;
            const json chunk = json::parse(event.data, nullptr, false);
            if (chunk.is_discarded()) return false;
            if (chunk.contains("error")) {
                out.error_event = chunk["error"].value("message", "?");
            }
            for (const auto& choice : chunk.value("choices", json::array())) {
                if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
                    out.finish_reason = choice["finish_reason"];
                }
            }
            first_chunk = true;
            return true;
        });
    out.ended = Clock::now();
    if (reply.isOk()) out.status = reply->status;
    return out;
}

double runningRequests(int port) {
    auto metrics = http::httpRequest("127.0.0.1", port, "GET", "/metrics", "", 5s);
    return metrics.isOk() ? core::PrometheusText::parse(metrics->body).sum("afd_num_requests_running") : -1;
}

class ServeFaults : public ::testing::TestWithParam<int> {};

TEST_P(ServeFaults, InFlightRequestsGet503AndTheServerReportsUnhealthy) {
    const int sig = GetParam();
    TempDir dir;
    const std::string cfg =
        fmt::format(R"({{"afd":{{"num_ffn_ranks":1,"port":{},"connect_timeout_s":30,"step_timeout_s":{}}}}})",
                    freePort(), kStepTimeoutS);
    core::ChildProcess::Spec spec;
    spec.argv = {AFD_BINARY,
                 "serve",
                 kTiny,
                 "--port",
                 "0",
                 "--port-file",
                 dir.file("serve.port"),
                 "--run-dir",
                 dir.file("ranks"),
                 "--served-model-name",
                 "tiny",
                 "--additional-config",
                 cfg};
    spec.env = {{"AFD_NUM_THREADS", "1"}};
    spec.stderr_path = dir.file("serve.log");
    core::ChildProcess server = core::ChildProcess::spawn(spec).value();
    const auto log = [&] { return readText(dir.file("serve.log")); };
    int port = 0;
    const auto deadline = Clock::now() + 120s;
    while (port == 0 && Clock::now() < deadline && !server.poll()) {
        const std::string text = readText(dir.file("serve.port"));
        if (!text.empty()) port = std::stoi(text);
        std::this_thread::sleep_for(20ms);
    }
    ASSERT_GT(port, 0) << log();
    const std::vector<pid_t> ffn = childrenOf(server.pid());
    ASSERT_EQ(ffn.size(), 1u) << "the FFN rank afd serve started";

    std::atomic<bool> first_chunk{false};
    Outcome plain, streamed;
    std::thread plain_client([&] { plain = plainCompletion(port); });
    std::thread stream_client([&] { streamed = streamedCompletion(port, first_chunk); });
    // Both requests are in the engine's running batch and the stream has had tokens.
    const bool in_flight = [&] {
        const auto until = Clock::now() + 30s;
        while (Clock::now() < until) {
            if (first_chunk && runningRequests(port) == 2) return true;
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }();
    const auto at = Clock::now();
    const bool signalled = in_flight && ::kill(ffn[0], sig) == 0;
    if (!signalled) server.signal(SIGTERM);  // so that the clients end and can be joined
    plain_client.join();
    stream_client.join();
    ASSERT_TRUE(in_flight) << log();
    ASSERT_TRUE(signalled);
    const auto bound = (sig == SIGSTOP ? std::chrono::seconds(kStepTimeoutS) : 0s) + kMargin;
    const double plain_s = std::chrono::duration<double>(plain.ended - at).count();
    const double stream_s = std::chrono::duration<double>(streamed.ended - at).count();
    std::cout << fmt::format(
        "[fault matrix] serve, FFN rank signal {}: plain request failed after {:.2f} s, stream "
        "after {:.2f} s\n",
        sig, plain_s, stream_s);

    EXPECT_EQ(plain.status, 503) << plain.body;
    const json body = json::parse(plain.body, nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << plain.body;
    EXPECT_NE(body["error"].value("message", "").find("ffn rank 0"), std::string::npos) << plain.body;
    EXPECT_LT(plain_s, std::chrono::duration<double>(bound).count());
    EXPECT_EQ(streamed.status, 200);
    EXPECT_NE(streamed.error_event.find("ffn rank 0"), std::string::npos) << streamed.error_event;
    EXPECT_NE(streamed.finish_reason, "length") << "a failed stream must not end as if it had finished";
    EXPECT_LT(stream_s, std::chrono::duration<double>(bound).count());
    auto health = http::httpRequest("127.0.0.1", port, "GET", "/health", "", 5s);
    ASSERT_TRUE(health.isOk());
    EXPECT_EQ(health->status, 503) << health->body;

    if (sig == SIGSTOP) ::kill(ffn[0], SIGCONT);
    server.signal(SIGTERM);
    const auto code = server.wait(60s);
    ASSERT_TRUE(code.has_value()) << "afd serve did not stop within 60 s of SIGTERM";
    EXPECT_EQ(*code, 3) << log();
    EXPECT_NE(log().find("ffn rank 0"), std::string::npos) << log();
}

INSTANTIATE_TEST_SUITE_P(FaultMatrix, ServeFaults, ::testing::Values(SIGKILL, SIGTERM, SIGSTOP), [](const auto& info) {
    return std::string(info.param == SIGKILL   ? "FfnSigkillMidStep"
                       : info.param == SIGTERM ? "FfnSigtermMidStep"
                                               : "FfnSigstopMidStep");
});

}  // namespace
}  // namespace afd::testing
