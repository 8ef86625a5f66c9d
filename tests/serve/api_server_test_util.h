// Helpers of the API server tests: a CPU engine on a tiny generated model with Qwen3's vocabulary (so that the real
// Qwen3 tokenizer's ids are in it), its loop behind a steered backend, and an ApiServer on loopback; plus a client
// that reads a whole SSE stream.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/engine_loop.h"
#include "attention/serving_test_util.h"
#include "serve/api_server.h"
#include "serve/request_record.h"

namespace afd::serve::test {

// The "tiny" preset with vocab 151936 and Qwen3's eos ids (151645, 151643), seed 11: written once per process.
std::string qwenVocabModelDir();

// The engine's options of these tests: max_model_len 512.
attention::EngineOptions serverEngineOptions(int64_t max_num_seqs = 64);

// Engine, loop and server (started; port()), torn down server first.
class ServerHarness {
public:
    // `tokenizer` null: a server without one. `tweak` edits the server's options before it starts.
    explicit ServerHarness(const tokenizer::Tokenizer* tokenizer, int64_t max_num_seqs = 64,
                           const std::function<void(ApiServerOptions&)>& tweak = {});
    ~ServerHarness();

    int port() const { return server_->port(); }
    attention::EngineLoop& loop() { return *loop_; }
    attention::test::SteeredBackend& backend() { return backend_; }
    const attention::test::HostModel& model() const { return model_; }
    ApiServer& server() { return *server_; }
    // The records on_request_done got so far.
    std::vector<RequestRecord> records() const;
    // Waits until `n` records came (true) or `timeout` ran out.
    bool waitRecords(size_t n, std::chrono::milliseconds timeout) const;
    // Waits until every KV block is free and nothing waits or runs.
    bool waitIdle(std::chrono::milliseconds timeout) const;

private:
    attention::test::HostModel model_;
    attention::CpuOps ops_;
    attention::test::SteeredBackend backend_;
    attention::Engine engine_;
    std::unique_ptr<attention::EngineLoop> loop_;
    std::unique_ptr<ApiServer> server_;
    mutable std::mutex mutex_;
    std::vector<RequestRecord> records_;
};

// A streamed reply: the status, and each data event (the last being "[DONE]" when complete).
struct StreamReply {
    int status = 0;
    std::string body;                    // a reply that was not an event stream
    std::vector<std::string> events;     // the data of each event
    bool done = false;                   // the last event was [DONE]
    std::vector<nlohmann::json> chunks;  // the events before [DONE], parsed
};
// POSTs `body` to `path` and reads the whole stream (fails the test on a transport error).
StreamReply postStream(int port, const std::string& path, const std::string& body,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20));

// POSTs and parses a JSON reply: (status, body as JSON; null when not JSON).
std::pair<int, nlohmann::json> postJson(int port, const std::string& path, const std::string& body);

}  // namespace afd::serve::test
