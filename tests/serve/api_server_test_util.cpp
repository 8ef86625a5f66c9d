#include "serve/api_server_test_util.h"

#include <gtest/gtest.h>

#include <thread>

#include "attention/local_mlp_backend.h"
#include "common/subprocess_util.h"
#include "core/check.h"
#include "http/http_client.h"
#include "model/synthetic.h"

namespace afd::serve::test {

using namespace std::chrono_literals;

std::string qwenVocabModelDir() {
    static const afd::testing::TempDir dir;
    static const std::string path = [] {
        const std::string model = dir.path() + "/tiny-qwen-vocab";
        auto config = model::ModelConfig::preset("tiny");
        AFD_CHECK_OK(config.status());
        config->vocab_size = 151936;
        config->eos_token_ids = {151645, 151643};
        model::SyntheticOptions options;
        options.seed = 11;
        AFD_CHECK_OK(model::writeSyntheticCheckpoint(model, *config, options));
        return model;
    }();
    return path;
}

attention::EngineOptions serverEngineOptions(int64_t max_num_seqs) {
    return attention::test::testEngineOptions(max_num_seqs, 2048);
}

ServerHarness::ServerHarness(const tokenizer::Tokenizer* tokenizer, int64_t max_num_seqs,
                             const std::function<void(ApiServerOptions&)>& tweak)
    : model_(attention::test::loadHostModel(qwenVocabModelDir())),
      backend_(std::make_unique<attention::LocalMlpBackend>(model_.config, model_.weights)),
      engine_(model_.config, model_.weights, ops_, backend_, serverEngineOptions(max_num_seqs)),
      loop_(std::make_unique<attention::EngineLoop>(engine_)) {
    ApiServerOptions options;
    options.served_model_name = "tiny";
    options.max_model_len = serverEngineOptions().scheduler.max_model_len;
    options.default_temperature = 0.0;
    if (tweak) tweak(options);
    server_ = std::make_unique<ApiServer>(options);
    AFD_CHECK_OK(server_->bind());
    AFD_CHECK_OK(server_->start(
        *loop_, tokenizer, [] { return std::string("afd_test_metric 1\n"); },
        [this](const RequestRecord& record) {
            std::lock_guard lock(mutex_);
            records_.push_back(record);
        }));
}

ServerHarness::~ServerHarness() {
    backend_.openGate();
    server_.reset();
    loop_.reset();
}

std::vector<RequestRecord> ServerHarness::records() const {
    std::lock_guard lock(mutex_);
    return records_;
}

bool ServerHarness::waitRecords(size_t n, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (records().size() >= n) return true;
        std::this_thread::sleep_for(5ms);
    }
    return records().size() >= n;
}

bool ServerHarness::waitIdle(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        const attention::EngineLoopStats s = loop_->stats();
        if (s.num_free_kv_blocks == s.num_kv_blocks && s.num_running == 0 && s.num_waiting == 0) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
}

StreamReply postStream(int port, const std::string& path, const std::string& body, std::chrono::milliseconds timeout) {
    http::HttpClientOptions options;
    options.timeout = timeout;
    http::HttpClient client("127.0.0.1", port, options);
    StreamReply reply;
    auto response = client.streamEvents("POST", path, body, [&](const http::SseEvent& event) {
        reply.events.push_back(event.data);
        return true;
    });
    EXPECT_TRUE(response.isOk()) << response.status().toString();
    if (!response.isOk()) return reply;
    reply.status = response->status;
    reply.body = response->body;
    reply.done = !reply.events.empty() && reply.events.back() == "[DONE]";
    for (const std::string& data : reply.events) {
        if (data == "[DONE]") break;
        reply.chunks.push_back(nlohmann::json::parse(data, nullptr, false));
    }
    return reply;
}

std::pair<int, nlohmann::json> postJson(int port, const std::string& path, const std::string& body) {
    auto response = http::httpRequest("127.0.0.1", port, "POST", path, body, 20s);
    EXPECT_TRUE(response.isOk()) << response.status().toString();
    if (!response.isOk()) return {0, nullptr};
    nlohmann::json parsed = nlohmann::json::parse(response->body, nullptr, false);
    if (parsed.is_discarded()) parsed = nullptr;
    return {response->status, parsed};
}

}  // namespace afd::serve::test
