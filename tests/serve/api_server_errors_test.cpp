// ApiServer when things go wrong, on loopback with the real HttpClient: refused requests (400/404) leave the server
// serving, a client that leaves mid-stream gets its request aborted and its KV blocks freed, failed steps end their
// requests with 503 or an error event, an unhealthy engine is 503 at once, a server without a tokenizer serves token
// ids only, and 256 concurrent streams complete.
#include "serve/api_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <thread>

#include "common/build_slowdown.h"
#include "http/http_client.h"
#include "serve/api_server_test_util.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::serve {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::postJson;
using test::postStream;
using test::ServerHarness;

class ApiServerErrorsTest : public tokenizer::testing::Qwen3TokenizerTest {};

void expectError(int status, const json& reply, int expected_status, const std::string& param,
                 const std::string& says) {
    EXPECT_EQ(status, expected_status) << reply;
    ASSERT_TRUE(reply.is_object()) << reply;
    EXPECT_EQ(reply["error"]["code"], expected_status);
    EXPECT_EQ(reply["error"]["param"], param.empty() ? json(nullptr) : json(param)) << reply;
    EXPECT_NE(reply["error"]["message"].get<std::string>().find(says), std::string::npos) << reply;
}

TEST_F(ApiServerErrorsTest, RefusedRequestsLeaveTheServerServing) {
    ServerHarness h(&tok());
    struct Case {
        const char* path;
        std::string body;
        int status;
        const char* param;
        const char* says;
    };
    const std::string too_long = json({{"prompt", std::vector<int32_t>(512, 100)}}).dump();
    const std::string no_room = json({{"prompt", std::vector<int32_t>(500, 100)}, {"max_tokens", 13}}).dump();
    const Case cases[] = {
        {"/v1/completions", "{not json", 400, "", "malformed JSON"},
        {"/v1/completions", R"({"prompt": "x", "max_tokens": "8"})", 400, "max_tokens", "an integer"},
        {"/v1/completions", R"({"prompt": "x", "best_of": 2})", 400, "best_of", "unknown field"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x", "weight": 1}]})", 400,
         "messages[0].weight", "unknown field"},
        {"/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404, "model", "does not exist"},
        {"/v1/completions", too_long, 400, "prompt", "max_model_len"},
        {"/v1/completions", no_room, 400, "max_tokens", "max_model_len"},
        {"/v1/completions", R"({"prompt": ""})", 400, "prompt", "empty"},
        {"/v1/completions", R"({"prompt": [1, 151936]})", 400, "", "vocabulary"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", 400, "n",
         "n must be 1"},
    };
    for (const Case& c : cases) {
        auto [status, reply] = postJson(h.port(), c.path, c.body);
        expectError(status, reply, c.status, c.param, c.says);
        auto [ok_status, ok] = postJson(h.port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 2})");
        EXPECT_EQ(ok_status, 200) << ok;
    }
    // Refusals are reported as such.
    size_t rejected = 0;
    for (const RequestRecord& record : h.records()) rejected += record.end == RequestEnd::kRejected ? 1 : 0;
    EXPECT_EQ(rejected, std::size(cases));
    // The same errors in a streaming request come as a JSON error reply, not a stream.
    auto [status, reply] = postJson(h.port(), "/v1/completions", R"({"prompt": "x", "stream": true, "top_p": 0})");
    expectError(status, reply, 400, "top_p", "in (0, 1]");
}

// The one request of `h` (max_tokens 400) was aborted before its end and every KV block is free again.
void expectAbortedAndFreed(ServerHarness& h, int64_t blocks) {
    ASSERT_TRUE(h.waitRecords(1, 10s));
    const RequestRecord record = h.records()[0];
    EXPECT_EQ(record.end, RequestEnd::kAborted);
    EXPECT_LT(record.num_output_tokens, 400);
    ASSERT_TRUE(h.waitIdle(10s));
    const attention::EngineLoopStats stats = h.loop().stats();
    EXPECT_EQ(stats.num_free_kv_blocks, blocks);
    EXPECT_EQ(stats.num_aborted, 1u);
    EXPECT_LT(stats.generation_tokens, 400u);
}

TEST_F(ApiServerErrorsTest, AClientThatLeavesMidStreamHasItsRequestAborted) {
    ServerHarness h(&tok());
    h.backend().setStepDelay(20ms);  // the request outlives the client
    const int64_t blocks = h.loop().stats().num_kv_blocks;
    http::HttpClient client("127.0.0.1", h.port());
    int events = 0;
    auto response = client.streamEvents(
        "POST", "/v1/completions",
        R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 400, "ignore_eos": true, "stream": true,
            "return_token_ids": true})",
        [&](const http::SseEvent&) { return ++events < 2; });  // leaves after the second chunk
    ASSERT_TRUE(response.isOk()) << response.status().toString();
    EXPECT_EQ(events, 2);
    expectAbortedAndFreed(h, blocks);
}

TEST_F(ApiServerErrorsTest, AClientThatLeavesBeforeAWholeReplyHasItsRequestAborted) {
    ServerHarness h(&tok());
    h.backend().setStepDelay(20ms);  // the request outlives the client
    const int64_t blocks = h.loop().stats().num_kv_blocks;
    http::HttpClientOptions options;
    options.timeout = 300ms;  // the client gives up (and closes its connection) long before 400 tokens
    http::HttpClient client("127.0.0.1", h.port(), options);
    auto response = client.post("/v1/completions",
                                R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 400, "ignore_eos": true})");
    ASSERT_FALSE(response.isOk());
    EXPECT_EQ(response.status().code(), core::StatusCode::kTimeout) << response.status().toString();
    expectAbortedAndFreed(h, blocks);
}

TEST_F(ApiServerErrorsTest, AFailedStepEndsItsRequestsWithAnError) {
    ServerHarness h(&tok());
    // Recoverable: the request of the failed step ends with an error, the next one is served.
    h.backend().failNextStep();
    auto [status, reply] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3})");
    expectError(status, reply, 503, "", "injected failure");
    h.backend().failNextStep();
    const test::StreamReply streamed =
        postStream(h.port(), "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true})");
    ASSERT_EQ(streamed.status, 200);
    ASSERT_TRUE(streamed.done);
    ASSERT_GE(streamed.chunks.size(), 2u);
    const json& error = streamed.chunks.back();
    EXPECT_EQ(error["error"]["code"], 503);
    EXPECT_NE(error["error"]["message"].get<std::string>().find("injected failure"), std::string::npos) << error;
    auto [ok_status, ok] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3})");
    EXPECT_EQ(ok_status, 200) << ok;
    ASSERT_TRUE(h.waitRecords(3, 5s));
    EXPECT_EQ(h.records()[0].end, RequestEnd::kError);
    EXPECT_EQ(h.records()[1].end, RequestEnd::kError);

    // Not recoverable (a lost FFN peer): the engine turns unhealthy; /health and new requests are 503 at once.
    h.backend().setRecoverable(false);
    h.backend().failNextStep();
    auto [lost_status, lost] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3})");
    EXPECT_EQ(lost_status, 503) << lost;
    auto health = http::httpRequest("127.0.0.1", h.port(), "GET", "/health", "", 5s);
    ASSERT_TRUE(health.isOk());
    EXPECT_EQ(health->status, 503);
    EXPECT_NE(health->body.find("unhealthy"), std::string::npos) << health->body;
    auto [then_status, then] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3})");
    expectError(then_status, then, 503, "", "cannot serve");
}

TEST(ApiServerNoTokenizerTest, ServesTokenIdsOnly) {
    ServerHarness h(nullptr);
    auto [status, reply] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 2,
                                                                     "return_token_ids": true})");
    ASSERT_EQ(status, 200) << reply;
    EXPECT_EQ(reply["choices"][0]["text"], "");
    EXPECT_EQ(reply["choices"][0]["token_ids"].size(), 2u);
    auto [text_status, text] = postJson(h.port(), "/v1/completions", R"({"prompt": "hello"})");
    expectError(text_status, text, 400, "prompt", "no tokenizer");
    auto [chat_status, chat] =
        postJson(h.port(), "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})");
    expectError(chat_status, chat, 400, "messages", "no tokenizer");
    auto [stop_status, stop] = postJson(h.port(), "/v1/completions", R"({"prompt": [1], "stop": "x"})");
    expectError(stop_status, stop, 400, "stop", "no tokenizer");
}

TEST_F(ApiServerErrorsTest, NoChatTemplateRefusesChat) {
    ServerHarness h(&tok(), 64, [](ApiServerOptions& o) { o.chat_template = ChatTemplate::kNone; });
    auto [status, reply] =
        postJson(h.port(), "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})");
    expectError(status, reply, 400, "messages", "no chat template");
}

TEST_F(ApiServerErrorsTest, StopEndsRequestsInFlight) {
    auto h = std::make_unique<ServerHarness>(&tok());
    h->backend().setStepDelay(20ms);
    std::atomic<int> statuses_503{0};
    test::StreamReply streamed;
    std::thread whole([&] {
        auto [status, reply] =
            postJson(h->port(), "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 400, "ignore_eos": true})");
        if (status == 503) ++statuses_503;
    });
    std::thread stream([&] {
        streamed = postStream(h->port(), "/v1/completions",
                              R"({"prompt": [3, 4], "max_tokens": 400, "ignore_eos": true, "stream": true})");
    });
    ASSERT_TRUE(h->backend().waitStepsBegun(4, 10s));
    const auto begun = std::chrono::steady_clock::now();
    h->server().stop();
    EXPECT_LT(std::chrono::steady_clock::now() - begun, 5s);
    whole.join();
    stream.join();
    EXPECT_EQ(statuses_503.load(), 1);
    ASSERT_TRUE(streamed.done);
    EXPECT_EQ(streamed.chunks.back()["error"]["code"], 503);
    EXPECT_TRUE(h->waitIdle(10s));
}

TEST_F(ApiServerErrorsTest, Holds256ConcurrentStreams) {
    constexpr int kClients = 256;
    ServerHarness h(&tok(), kClients);
    std::vector<test::StreamReply> replies(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
        clients.emplace_back([&, i] {
            const json body = {{"prompt", {1 + i, 2, 3}},
                               {"max_tokens", 2},
                               {"ignore_eos", true},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
            // The first bytes come after the step that prefills all 256 prompts (the CPU LM head over a 151936-token
            // vocabulary), which a sanitizer build runs several times slower.
            replies[i] = postStream(h.port(), "/v1/completions", body.dump(), 25s * testing::kBuildSlowdown);
        });
    }
    for (std::thread& t : clients) t.join();
    int complete = 0;
    for (const test::StreamReply& r : replies) {
        if (r.status == 200 && r.done && !r.chunks.empty() && r.chunks.back()["usage"]["completion_tokens"] == 2) {
            ++complete;
        }
    }
    EXPECT_EQ(complete, kClients);
    EXPECT_TRUE(h.waitIdle(5s));
}

}  // namespace
}  // namespace afd::serve
