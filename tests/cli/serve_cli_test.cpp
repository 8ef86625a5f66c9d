// `afd serve` as a user runs it: a process on loopback, reached with a real HTTP client. The dense engine and an AFD
// deployment the server starts itself (m2n, 1 attention rank and 2 FFN ranks on the CPU), checked against `afd
// generate` (the dense reference) run on each prompt alone; an FFN rank killed mid-stream; SIGTERM.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess_util.h"
#include "core/child_process.h"
#include "core/prometheus_text.h"
#include "http/http_client.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

std::string readAll(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `afd serve` in a child process, on an ephemeral port (--port-file).
class ServeProcess {
public:
    ServeProcess(const TempDir& dir, const std::vector<std::string>& extra_args,
                 const std::vector<std::pair<std::string, std::string>>& extra_env = {})
        : dir_(dir) {
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
                     "tiny"};
        for (const auto& arg : extra_args) spec.argv.push_back(arg);
        spec.env = {{"AFD_NUM_THREADS", "1"}};
        for (const auto& kv : extra_env) spec.env.push_back(kv);
        spec.stdout_path = dir.file("serve.out");
        spec.stderr_path = dir.file("serve.log");
        process_ = core::ChildProcess::spawn(spec).value();
    }
    ~ServeProcess() {
        if (!exited_) process_.terminate(5s);
    }

    // Waits for the port file; 0 when the server exits or 120 s pass.
    int waitPort() {
        const auto deadline = std::chrono::steady_clock::now() + 120s;
        while (std::chrono::steady_clock::now() < deadline) {
            if (process_.poll()) return 0;
            const std::string text = readAll(dir_.file("serve.port"));
            if (!text.empty()) return port_ = std::stoi(text);
            std::this_thread::sleep_for(20ms);
        }
        return 0;
    }
    // SIGTERM and the exit code (nullopt: not within `timeout`).
    std::optional<int> stop(std::chrono::milliseconds timeout) {
        process_.signal(SIGTERM);
        auto code = process_.wait(timeout);
        exited_ = code.has_value();
        return code;
    }
    std::string log() const { return readAll(dir_.file("serve.log")); }
    pid_t pid() const { return process_.pid(); }
    int port() const { return port_; }

private:
    const TempDir& dir_;
    core::ChildProcess process_;
    int port_ = 0;
    bool exited_ = false;
};

// The child processes of `pid` (the FFN ranks afd serve started).
std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> out;
    std::istringstream in(readAll(fmt::format("/proc/{}/task/{}/children", pid, pid)));
    for (pid_t child; in >> child;) out.push_back(child);
    return out;
}

int visibleGpus() {
#if defined(AFD_HAVE_CUDA)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

// `afd generate` (the dense reference) on `prompt` alone.
std::vector<int32_t> referenceIds(const std::vector<int32_t>& prompt, int max_tokens, const std::string& device) {
    const ProcessResult r = runProcess({AFD_BINARY, "--log-level", "warn", "generate", "--model", kTiny, "--prompt-ids",
                                        fmt::format("{}", fmt::join(prompt, ",")), "--max-tokens",
                                        std::to_string(max_tokens), "--json", "--device", device},
                                       120s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out, nullptr, false);
    if (out.is_discarded()) return {};
    return out.at("results").at(0).at("new_ids").get<std::vector<int32_t>>();
}

struct StreamResult {
    int status = 0;
    std::vector<int32_t> token_ids;
    int64_t prompt_tokens = -1;
    int64_t completion_tokens = -1;
    std::string finish_reason;
    std::string error;  // an error event's message, or the client's error
    bool done = false;  // [DONE] seen
    std::chrono::steady_clock::time_point ended;
};

StreamResult streamCompletion(int port, const std::vector<int32_t>& prompt, int max_tokens,
                              const std::function<void()>& on_first_chunk = {}) {
    const json request = {{"model", "tiny"},         {"prompt", prompt}, {"max_tokens", max_tokens},
                          {"temperature", 0},        {"stream", true},   {"stream_options", {{"include_usage", true}}},
                          {"return_token_ids", true}};
    StreamResult out;
    http::HttpClientOptions options;
    options.timeout = 60s;
    http::HttpClient client("127.0.0.1", port, options);
    bool first = true;
    auto reply = client.streamEvents("POST", "/v1/completions", request.dump(), [&](const http::SseEvent& event) {
        if (event.data == "[DONE]") {
            out.done = true;
            return false;
        }
        const json chunk = json::parse(event.data, nullptr, false);
        if (chunk.is_discarded()) {
            out.error = "not JSON: " + event.data;
            return false;
        }
        if (chunk.contains("error")) {
            out.error = chunk["error"].value("message", "?");
            return true;
        }
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
            out.prompt_tokens = chunk["usage"].value("prompt_tokens", -1);
            out.completion_tokens = chunk["usage"].value("completion_tokens", -1);
        }
        for (const auto& choice : chunk.value("choices", json::array())) {
            for (const auto& id : choice.value("token_ids", json::array())) out.token_ids.push_back(id.get<int32_t>());
            if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
                out.finish_reason = choice["finish_reason"];
            }
        }
        if (first && on_first_chunk) on_first_chunk();
        first = false;
        return true;
    });
    out.ended = std::chrono::steady_clock::now();
    if (!reply.isOk()) {
        out.error = reply.status().message();
    } else {
        out.status = reply->status;
        if (reply->status != 200) out.error = reply->body;
    }
    return out;
}

std::vector<std::vector<int32_t>> testPrompts(int count) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < count; ++i) {
        std::vector<int32_t> p;
        for (int t = 0; t < 3 + i % 7; ++t) p.push_back((i * 37 + t * 11 + 5) % 380 + 1);
        prompts.push_back(std::move(p));
    }
    return prompts;
}

// 32 concurrent streams, each checked against the dense reference on its prompt alone, then a clean SIGTERM.
void expectConcurrentStreamsMatchTheReference(const std::vector<std::string>& serve_args,
                                              const std::string& device = "cpu") {
    constexpr int kStreams = 32;
    constexpr int kMaxTokens = 12;
    const auto prompts = testPrompts(kStreams);
    TempDir dir;
    ServeProcess server(dir, serve_args);
    ASSERT_GT(server.waitPort(), 0) << server.log();
    std::vector<StreamResult> results(kStreams);
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
        clients.emplace_back([&, i] { results[i] = streamCompletion(server.port(), prompts[i], kMaxTokens); });
    }
    for (auto& t : clients) t.join();
    for (int i = 0; i < kStreams; ++i) {
        SCOPED_TRACE(fmt::format("stream {}", i));
        const StreamResult& r = results[i];
        EXPECT_EQ(r.status, 200) << r.error;
        EXPECT_TRUE(r.error.empty()) << r.error;
        EXPECT_TRUE(r.done);
        EXPECT_EQ(r.token_ids, referenceIds(prompts[i], kMaxTokens, device));
        EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
        EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(r.token_ids.size()));
        EXPECT_EQ(r.finish_reason, r.token_ids.size() == kMaxTokens ? "length" : "stop");
    }
    auto metrics = http::httpRequest("127.0.0.1", server.port(), "GET", "/metrics", "", 5s);
    ASSERT_TRUE(metrics.isOk());
    const core::PrometheusText m = core::PrometheusText::parse(metrics->body);
    EXPECT_EQ(m.sum("afd_generation_tokens_total"), kStreams * kMaxTokens) << metrics->body.substr(0, 4000);
    const auto code = server.stop(60s);
    ASSERT_TRUE(code.has_value()) << "afd serve did not stop within 60 s of SIGTERM";
    EXPECT_EQ(*code, 0) << server.log();
}

TEST(ServeCli, DenseEngineStreamsEqualTheReferenceOnEachPromptAlone) { expectConcurrentStreamsMatchTheReference({}); }

TEST(ServeCli, AfdM2n1A2FStreamsEqualTheReferenceOnEachPromptAlone) {
    expectConcurrentStreamsMatchTheReference({"--additional-config", R"({"afd":{}})"});
}

// The same through the GPU engine (skipped without a GPU): the dense GPU engine, and a GPU attention rank with two
// GPU FFN ranks (on one GPU they share it: run under MPS), each against `afd generate --device cuda` alone.
TEST(ServeCudaCli, DenseGpuEngineStreamsEqualTheGpuReferenceOnEachPromptAlone) {
    if (visibleGpus() == 0) GTEST_SKIP() << "no CUDA device";
    expectConcurrentStreamsMatchTheReference({"--device", "cuda"}, "cuda");
}

TEST(ServeCudaCli, AfdM2n1A2FOnGpusStreamsEqualTheGpuReferenceOnEachPromptAlone) {
    if (visibleGpus() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string ffn_gpus = visibleGpus() >= 3 ? "1,2" : "0,0";
    expectConcurrentStreamsMatchTheReference(
        {"--device", "cuda", "--ffn-device-ids", ffn_gpus, "--additional-config", R"({"afd":{}})"}, "cuda");
}

TEST(ServeCli, AnFfnRankKilledMidStreamEndsTheStreamsWithAnErrorAndTheServerReportsUnhealthy) {
    TempDir dir;
    ServeProcess server(dir, {"--additional-config", R"({"afd":{}})"});
    ASSERT_GT(server.waitPort(), 0) << server.log();
    const std::vector<pid_t> ffn = childrenOf(server.pid());
    ASSERT_EQ(ffn.size(), 2u) << "the FFN ranks afd serve started";
    constexpr int kStreams = 4;
    std::atomic<int> started{0};
    std::vector<StreamResult> results(kStreams);
    std::vector<std::thread> clients;
    const auto prompts = testPrompts(kStreams);
    for (int i = 0; i < kStreams; ++i) {
        clients.emplace_back(
            [&, i] { results[i] = streamCompletion(server.port(), prompts[i], 3000, [&] { ++started; }); });
    }
    const auto wait_until = std::chrono::steady_clock::now() + 30s;
    while (started < kStreams && std::chrono::steady_clock::now() < wait_until) std::this_thread::sleep_for(5ms);
    const bool all_started = started.load() == kStreams;
    const bool killed_one = all_started && ::kill(ffn[1], SIGKILL) == 0;
    const auto killed = std::chrono::steady_clock::now();
    if (!killed_one) server.stop(60s);  // the streams end, so that the clients can be joined
    for (auto& t : clients) t.join();
    ASSERT_TRUE(all_started) << started.load() << " of " << kStreams << " streams started; " << results[0].error;
    ASSERT_TRUE(killed_one);
    for (int i = 0; i < kStreams; ++i) {
        SCOPED_TRACE(fmt::format("stream {}", i));
        EXPECT_FALSE(results[i].error.empty()) << "the stream ended without an error";
        EXPECT_LT(results[i].token_ids.size(), 3000u);
        EXPECT_LT(results[i].ended - killed, 10s);
    }
    auto health = http::httpRequest("127.0.0.1", server.port(), "GET", "/health", "", 5s);
    ASSERT_TRUE(health.isOk());
    EXPECT_EQ(health->status, 503) << health->body;
    // A new request is refused at once, and the server still answers.
    const StreamResult after = streamCompletion(server.port(), prompts[0], 4);
    EXPECT_EQ(after.status, 503) << after.error;
    const auto code = server.stop(60s);
    ASSERT_TRUE(code.has_value()) << "afd serve did not stop within 60 s of SIGTERM";
    EXPECT_EQ(*code, 3) << "an FFN rank died: a lost peer\n" << server.log();
    EXPECT_NE(server.log().find("ffn rank 1 was killed by signal 9"), std::string::npos) << server.log();
}

// SIGTERM while the weights load (AFD_TEST_LOAD_DELAY_MS: a 1 s sleep after each of the fixture's 3 layers) ends the
// load after the layer in hand, not at its end; the FFN ranks the server started stop too, and the run exits 0.
void expectSigtermDuringTheLoadStopsIt(const std::vector<std::string>& serve_args, const std::string& what,
                                       size_t ffn_ranks) {
    constexpr int kLayerDelayMs = 1000;
    TempDir dir;
    std::vector<std::string> args = {"--log-level", "info"};
    args.insert(args.end(), serve_args.begin(), serve_args.end());
    ServeProcess server(dir, args, {{"AFD_TEST_LOAD_DELAY_MS", std::to_string(kLayerDelayMs)}});
    const std::string first_layer = fmt::format("loading {}: 1/3 layers", what);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (server.log().find(first_layer) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    ASSERT_NE(server.log().find(first_layer), std::string::npos) << server.log();
    const std::vector<pid_t> ffn = childrenOf(server.pid());
    ASSERT_EQ(ffn.size(), ffn_ranks) << "the FFN ranks afd serve started";
    const auto signalled = std::chrono::steady_clock::now();
    const auto code = server.stop(30s);
    const auto took = std::chrono::steady_clock::now() - signalled;
    ASSERT_TRUE(code.has_value()) << "afd serve did not stop within 30 s of SIGTERM\n" << server.log();
    EXPECT_EQ(*code, 0) << server.log();
    const std::string log = server.log();
    EXPECT_NE(log.find("stopped before serving: the weights' load was stopped after 2 of 3 layers"), std::string::npos)
        << log;
    EXPECT_NE(readAll(dir.file("serve.out")).find("afd serve: stopped before serving"), std::string::npos);
    // At most one more layer (1 s) and the exit, where the rest of the load takes 2 s; with FFN ranks, theirs stop
    // the same way (at most one more of their layers).
    const auto bound = std::chrono::milliseconds(kLayerDelayMs * (ffn_ranks > 0 ? 4 : 2));
    EXPECT_LT(took, bound) << log;
    for (pid_t pid : ffn) EXPECT_NE(::kill(pid, 0), 0) << "FFN rank process " << pid << " outlived afd serve";
}

TEST(ServeCli, SigtermDuringTheDenseLoadEndsItAfterTheLayerInHandAndExitsZero) {
    expectSigtermDuringTheLoadStopsIt({}, "weights", 0);
}

TEST(ServeCli, SigtermDuringTheAttentionLoadStopsTheFfnRanksAndExitsZero) {
    expectSigtermDuringTheLoadStopsIt({"--additional-config", R"({"afd":{}})"}, "attention rank weights", 2);
}

#if defined(AFD_BINARY_HAS_LAB)
// 256 streaming clients at once (the AFD deployment), driven by `afd bench serve`, which reports its percentiles.
TEST(ServeCli, HoldsTwoHundredFiftySixConcurrentStreamsAndBenchServeReportsItsPercentiles) {
    TempDir dir;
    ServeProcess server(dir, {"--additional-config", R"({"afd":{}})"});
    ASSERT_GT(server.waitPort(), 0) << server.log();
    const ProcessResult bench = runProcess({AFD_BINARY,
                                            "bench",
                                            "serve",
                                            "--port",
                                            std::to_string(server.port()),
                                            "--num-prompts",
                                            "256",
                                            "--max-concurrency",
                                            "256",
                                            "--request-rate",
                                            "inf",
                                            "--random-input-len",
                                            "8",
                                            "--random-output-len",
                                            "48",
                                            "--ignore-eos",
                                            "--random-vocab-size",
                                            "380",
                                            "--timeout-s",
                                            "60",
                                            "--result-json",
                                            dir.file("bench.json")},
                                           120s);
    EXPECT_EQ(bench.exit_code, 0) << bench.out << bench.err;
    for (const char* line : {"Successful requests:                     256",
                             "Failed requests:                         0", "Maximum request concurrency:",
                             "P99 TTFT (ms):", "P99 ITL (ms):", "P99 E2EL (ms):", "Output token throughput (tok/s):"}) {
        EXPECT_NE(bench.out.find(line), std::string::npos) << line << "\n" << bench.out;
    }
    const json result = json::parse(readAll(dir.file("bench.json")), nullptr, false);
    ASSERT_FALSE(result.is_discarded());
    // The clients start together and each stream lasts 48 steps: most of them are in flight at once.
    EXPECT_GE(result.value("max_concurrency_seen", 0), 128) << bench.out;
    auto metrics = http::httpRequest("127.0.0.1", server.port(), "GET", "/metrics", "", 5s);
    ASSERT_TRUE(metrics.isOk());
    const core::PrometheusText m = core::PrometheusText::parse(metrics->body);
    EXPECT_EQ(m.sum("afd_generation_tokens_total"), 256 * 48);
    EXPECT_EQ(m.sum("afd_time_to_first_token_seconds_count"), 256);
    EXPECT_EQ(m.sum("afd_num_requests_running"), 0);
    EXPECT_EQ(server.stop(60s), std::optional<int>(0)) << server.log();
}
#endif

TEST(ServeCli, RefusesASecondServerOnTheSamePortBeforeLoading) {
    TempDir dir;
    ServeProcess server(dir, {});
    ASSERT_GT(server.waitPort(), 0) << server.log();
    const ProcessResult second = runProcess({AFD_BINARY, "serve", kTiny, "--port", std::to_string(server.port())}, 30s);
    EXPECT_EQ(second.exit_code, 2) << "a port in use is bad input, found before any work\n" << second.err;
    EXPECT_NE(second.err.find(std::to_string(server.port())), std::string::npos) << second.err;
    EXPECT_EQ(server.stop(60s), std::optional<int>(0));
}

TEST(ServeCli, BadDeploymentsAreRefusedNamingTheKey) {
    const ProcessResult ffn_role =
        runProcess({AFD_BINARY, "serve", kTiny, "--additional-config", R"({"afd":{"role":"ffn"}})"}, 30s);
    EXPECT_EQ(ffn_role.exit_code, 2);
    EXPECT_NE(ffn_role.err.find("afd ffn"), std::string::npos) << ffn_role.err;
    const ProcessResult two_attention = runProcess(
        {AFD_BINARY, "serve", kTiny, "--additional-config", R"({"afd":{"num_attention_ranks":2,"num_ffn_ranks":2}})"},
        30s);
    EXPECT_EQ(two_attention.exit_code, 2);
    EXPECT_NE(two_attention.err.find("num_attention_ranks"), std::string::npos) << two_attention.err;
    const ProcessResult no_model = runProcess({AFD_BINARY, "serve", "/nonexistent/model"}, 30s);
    EXPECT_EQ(no_model.exit_code, 2);
    EXPECT_NE(no_model.err.find("/nonexistent/model"), std::string::npos) << no_model.err;
}

}  // namespace
}  // namespace afd::testing
