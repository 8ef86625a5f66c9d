// ApiServer on loopback with the real HttpClient, a CPU engine loop on a tiny model with Qwen3's vocabulary and the
// real Qwen3 tokenizer: concurrent streams get the ids each prompt gives alone, text and chat prompts give the
// tokenizer's (and HF's) ids, stop strings, usage, and the other routes.
#include "serve/api_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <thread>

#include "http/http_client.h"
#include "serve/api_server_test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::serve {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::postJson;
using test::postStream;
using test::ServerHarness;

class ApiServerTest : public tokenizer::testing::Qwen3TokenizerTest {};

attention::SamplingParams greedy(int64_t max_tokens) {
    attention::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

std::vector<int32_t> ids(const json& j) { return j.get<std::vector<int32_t>>(); }

TEST_F(ApiServerTest, ConcurrentStreamsGetTheIdsEachPromptGivesAlone) {
    constexpr int kRequests = 32;
    constexpr int64_t kMaxTokens = 6;
    ServerHarness h(&tok());
    std::mt19937 rng(5);
    std::vector<std::string> bodies;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < kRequests; ++i) {
        json body = {{"model", "tiny"},         {"max_tokens", kMaxTokens},
                     {"temperature", 0},        {"ignore_eos", true},
                     {"stream", true},          {"stream_options", {{"include_usage", true}}},
                     {"return_token_ids", true}};
        if (i % 2 == 0) {  // a text prompt
            const std::string text = fmt::format("Request number {} asks about item {}.", i, rng() % 1000);
            body["prompt"] = text;
            auto encoded = tok().encode(text);
            ASSERT_TRUE(encoded.isOk());
            prompts.emplace_back(encoded->begin(), encoded->end());
        } else {  // token ids
            std::vector<int32_t> p(3 + rng() % 20);
            for (int32_t& id : p) id = static_cast<int32_t>(rng() % 150000);
            body["prompt"] = p;
            prompts.push_back(p);
        }
        bodies.push_back(body.dump());
    }
    const auto alone = attention::test::idsAlone(h.model(), prompts,
                                                 std::vector<attention::SamplingParams>(kRequests, greedy(kMaxTokens)),
                                                 test::serverEngineOptions());
    std::vector<test::StreamReply> replies(kRequests);
    std::vector<std::thread> clients;
    for (int i = 0; i < kRequests; ++i) {
        clients.emplace_back([&, i] { replies[i] = postStream(h.port(), "/v1/completions", bodies[i]); });
    }
    for (std::thread& t : clients) t.join();
    for (int i = 0; i < kRequests; ++i) {
        const test::StreamReply& r = replies[i];
        ASSERT_EQ(r.status, 200) << r.body;
        ASSERT_TRUE(r.done) << i;
        ASSERT_GE(r.chunks.size(), 2u);
        std::vector<int32_t> got;
        std::string text;
        for (size_t c = 0; c + 1 < r.chunks.size(); ++c) {
            const json& chunk = r.chunks[c];
            EXPECT_EQ(chunk["object"], "text_completion");
            EXPECT_EQ(chunk["id"], r.chunks[0]["id"]);
            ASSERT_EQ(chunk["choices"].size(), 1u);
            const json& choice = chunk["choices"][0];
            if (c == 0) {
                EXPECT_EQ(ids(choice["prompt_token_ids"]), prompts[i]);
            }
            const auto new_ids = ids(choice["token_ids"]);
            got.insert(got.end(), new_ids.begin(), new_ids.end());
            text += choice["text"].get<std::string>();
            const bool last = c + 2 == r.chunks.size();
            EXPECT_EQ(choice["finish_reason"], last ? json("length") : json(nullptr)) << chunk;
        }
        EXPECT_EQ(got, alone[i]) << "request " << i;
        EXPECT_EQ(text, tok().decode(alone[i], {.skip_special_tokens = true}));
        const json& usage_chunk = r.chunks.back();
        EXPECT_TRUE(usage_chunk["choices"].empty());
        EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], prompts[i].size());
        EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], kMaxTokens);
        EXPECT_EQ(usage_chunk["usage"]["total_tokens"], prompts[i].size() + kMaxTokens);
    }
    ASSERT_TRUE(h.waitRecords(kRequests, 5s));
    for (const RequestRecord& record : h.records()) {
        EXPECT_EQ(record.end, RequestEnd::kLength);
        EXPECT_TRUE(record.stream);
        EXPECT_EQ(record.endpoint, "completions");
        EXPECT_EQ(record.num_output_tokens, kMaxTokens);
        EXPECT_FALSE(record.outputs.empty());
        EXPECT_LE(record.arrival, record.outputs.front().first);
        EXPECT_LE(record.outputs.back().first, record.finished);
    }
    EXPECT_TRUE(h.waitIdle(5s));
}

TEST_F(ApiServerTest, TextPromptsGiveTheTokenizersIds) {
    ServerHarness h(&tok());
    const json golden =
        json::parse(tokenizer::testing::readFile(std::string(AFD_FIXTURES_DIR) + "/qwen3-tokenizer/golden.json"));
    int checked = 0;
    for (const json& entry : golden) {
        const auto expected = ids(entry["ids"]);
        if (expected.empty() || expected.size() > 200 || checked == 8) continue;
        const json body = {{"prompt", entry["text"]}, {"max_tokens", 1}, {"return_token_ids", true}};
        auto [status, reply] = postJson(h.port(), "/v1/completions", body.dump());
        ASSERT_EQ(status, 200) << reply;
        EXPECT_EQ(ids(reply["choices"][0]["prompt_token_ids"]), expected) << entry["text"];
        EXPECT_EQ(reply["usage"]["prompt_tokens"], expected.size());
        ++checked;
    }
    EXPECT_EQ(checked, 8);
}

TEST_F(ApiServerTest, WholeCompletionAndItsFields) {
    ServerHarness h(&tok());
    const std::vector<int32_t> prompt = {9707, 11, 847, 5562};
    const auto alone = attention::test::idsAlone(h.model(), {prompt}, {greedy(5)}, test::serverEngineOptions());
    const json body = {{"prompt", {prompt}}, {"max_tokens", 5}, {"ignore_eos", true}, {"return_token_ids", true}};
    auto [status, reply] = postJson(h.port(), "/v1/completions", body.dump());
    ASSERT_EQ(status, 200) << reply;
    EXPECT_EQ(reply["object"], "text_completion");
    EXPECT_EQ(reply["model"], "tiny");
    EXPECT_TRUE(reply["id"].get<std::string>().starts_with("cmpl-"));
    EXPECT_GT(reply["created"].get<int64_t>(), 1600000000);
    const json& choice = reply["choices"][0];
    EXPECT_EQ(choice["index"], 0);
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(ids(choice["token_ids"]), alone[0]);
    EXPECT_EQ(ids(choice["prompt_token_ids"]), prompt);
    EXPECT_EQ(choice["text"], tok().decode(alone[0], {.skip_special_tokens = true}));
    EXPECT_EQ(reply["usage"]["completion_tokens"], 5);
    EXPECT_EQ(reply["usage"]["total_tokens"], 9);
    // Without return_token_ids there are no ids.
    auto [plain_status, plain] = postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 2})");
    ASSERT_EQ(plain_status, 200);
    EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
    EXPECT_FALSE(plain["choices"][0].contains("prompt_token_ids"));
    // The default max_tokens of completions is 16.
    EXPECT_EQ(postJson(h.port(), "/v1/completions", R"({"prompt": [1, 2], "ignore_eos": true})")
                  .second["usage"]["completion_tokens"],
              16);
}

TEST_F(ApiServerTest, ChatRendersTheTemplatesIds) {
    ServerHarness h(&tok());
    const json messages = json::array(
        {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Name a colour."}}});
    std::vector<tokenizer::ChatMessage> conversation = {{"system", "You are terse.", {}, {}},
                                                        {"user", "Name a colour.", {}, {}}};
    tokenizer::ChatRenderOptions render;
    render.add_generation_prompt = true;
    render.enable_thinking = false;
    auto text = tokenizer::renderQwen3Chat(conversation, render);
    ASSERT_TRUE(text.isOk());
    auto expected = tok().encode(*text);
    ASSERT_TRUE(expected.isOk());
    const json body = {{"model", "tiny"},          {"messages", messages},
                       {"max_tokens", 4},          {"ignore_eos", true},
                       {"return_token_ids", true}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
    auto [status, reply] = postJson(h.port(), "/v1/chat/completions", body.dump());
    ASSERT_EQ(status, 200) << reply;
    EXPECT_EQ(reply["object"], "chat.completion");
    EXPECT_TRUE(reply["id"].get<std::string>().starts_with("chatcmpl-"));
    EXPECT_EQ(ids(reply["prompt_token_ids"]), *expected);
    const json& choice = reply["choices"][0];
    EXPECT_EQ(choice["message"]["role"], "assistant");
    const auto out = ids(choice["token_ids"]);
    EXPECT_EQ(out.size(), 4u);
    EXPECT_EQ(choice["message"]["content"], tok().decode(out, {.skip_special_tokens = true}));
    EXPECT_EQ(reply["usage"]["prompt_tokens"], expected->size());

    // Streamed: a role chunk (with the prompt's ids), content chunks, the finish chunk, usage, [DONE].
    json streamed = body;
    streamed["stream"] = true;
    streamed["stream_options"] = {{"include_usage", true}};
    const test::StreamReply r = postStream(h.port(), "/v1/chat/completions", streamed.dump());
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(r.done);
    ASSERT_GE(r.chunks.size(), 3u);
    EXPECT_EQ(r.chunks[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(r.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(ids(r.chunks[0]["prompt_token_ids"]), *expected);
    std::vector<int32_t> got;
    std::string content;
    for (size_t c = 1; c + 1 < r.chunks.size(); ++c) {
        const json& choice_chunk = r.chunks[c]["choices"][0];
        EXPECT_FALSE(choice_chunk["delta"].contains("role"));
        for (int32_t id : ids(choice_chunk["token_ids"])) got.push_back(id);
        content += choice_chunk["delta"].value("content", "");
    }
    EXPECT_EQ(r.chunks[r.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(got, out);
    EXPECT_EQ(content, choice["message"]["content"]);
    EXPECT_EQ(r.chunks.back()["usage"]["completion_tokens"], 4);

    // Without max_tokens a chat request may use the rest of the context: a prompt 4 tokens short of it.
    std::vector<tokenizer::ChatMessage> long_chat = {{"user", "", {}, {}}};
    for (int words = 0;; ++words) {
        long_chat[0].content += " hello";
        tokenizer::ChatRenderOptions generation;
        generation.add_generation_prompt = true;
        auto rendered = tokenizer::renderQwen3Chat(long_chat, generation);
        ASSERT_TRUE(rendered.isOk());
        auto encoded = tok().encode(*rendered);
        ASSERT_TRUE(encoded.isOk());
        ASSERT_LT(words, 600);
        if (encoded->size() >= 508) {
            ASSERT_EQ(encoded->size(), 508u);
            break;
        }
    }
    const json long_body = {{"messages", {{{"role", "user"}, {"content", long_chat[0].content}}}},
                            {"ignore_eos", true}};
    auto [rest_status, rest] = postJson(h.port(), "/v1/chat/completions", long_body.dump());
    ASSERT_EQ(rest_status, 200) << rest;
    EXPECT_EQ(rest["usage"]["prompt_tokens"], 508);
    EXPECT_EQ(rest["usage"]["completion_tokens"], 4);
    EXPECT_EQ(rest["choices"][0]["finish_reason"], "length");
}

TEST_F(ApiServerTest, StopStringsEndTheTextAndTheRequest) {
    ServerHarness h(&tok());
    const std::vector<int32_t> prompt = {785, 3974, 13876, 38835};
    const json full_body = {{"prompt", prompt}, {"max_tokens", 24}, {"ignore_eos", true}, {"return_token_ids", true}};
    auto [status, full] = postJson(h.port(), "/v1/completions", full_body.dump());
    ASSERT_EQ(status, 200);
    const std::string text = full["choices"][0]["text"];
    const auto full_ids = ids(full["choices"][0]["token_ids"]);
    ASSERT_GT(text.size(), 8u) << text;
    // A stop string from the middle of the text, spanning whatever tokens it spans.
    const size_t at = text.size() / 3;
    size_t start = at;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t end = std::min(text.size(), start + 3);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    const std::string stop = text.substr(start, end - start);
    const size_t first = text.find(stop);
    for (const bool stream : {false, true}) {
        json body = full_body;
        body["stop"] = {"never-in-the-text-\x01", stop};
        body["stream"] = stream;
        std::string got;
        std::vector<int32_t> got_ids;
        std::string finish;
        if (stream) {
            const test::StreamReply r = postStream(h.port(), "/v1/completions", body.dump());
            ASSERT_TRUE(r.done);
            for (const json& chunk : r.chunks) {
                got += chunk["choices"][0]["text"].get<std::string>();
                for (int32_t id : ids(chunk["choices"][0]["token_ids"])) got_ids.push_back(id);
                if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
            }
        } else {
            auto [s, reply] = postJson(h.port(), "/v1/completions", body.dump());
            ASSERT_EQ(s, 200);
            got = reply["choices"][0]["text"];
            got_ids = ids(reply["choices"][0]["token_ids"]);
            finish = reply["choices"][0]["finish_reason"];
            EXPECT_EQ(reply["usage"]["completion_tokens"], got_ids.size());
        }
        EXPECT_EQ(got, text.substr(0, first)) << "stop " << json(stop);
        EXPECT_EQ(finish, "stop");
        // The ids through the token that completed the stop string: a prefix of the full ids.
        ASSERT_LE(got_ids.size(), full_ids.size());
        EXPECT_TRUE(std::equal(got_ids.begin(), got_ids.end(), full_ids.begin()));
        EXPECT_NE(tok().decode(got_ids).find(stop), std::string::npos);
        EXPECT_LT(got_ids.size(), full_ids.size());
    }
    EXPECT_TRUE(h.waitIdle(5s));  // the engine requests were aborted, their blocks freed
}

TEST_F(ApiServerTest, ModelsHealthAndMetrics) {
    ServerHarness h(&tok());
    auto models = http::httpRequest("127.0.0.1", h.port(), "GET", "/v1/models", "", 5s);
    ASSERT_TRUE(models.isOk());
    EXPECT_EQ(models->status, 200);
    const json list = json::parse(models->body);
    EXPECT_EQ(list["object"], "list");
    EXPECT_EQ(list["data"][0]["id"], "tiny");
    EXPECT_EQ(list["data"][0]["object"], "model");
    EXPECT_EQ(list["data"][0]["max_model_len"], 512);
    auto health = http::httpRequest("127.0.0.1", h.port(), "GET", "/health", "", 5s);
    ASSERT_TRUE(health.isOk());
    EXPECT_EQ(health->status, 200);
    auto metrics = http::httpRequest("127.0.0.1", h.port(), "GET", "/metrics", "", 5s);
    ASSERT_TRUE(metrics.isOk());
    EXPECT_EQ(metrics->status, 200);
    EXPECT_EQ(metrics->body, "afd_test_metric 1\n");
    EXPECT_EQ(metrics->content_type, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace
}  // namespace afd::serve
