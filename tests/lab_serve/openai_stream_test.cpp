#include "lab/serve/openai_stream.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace afd::lab {
namespace {

using nlohmann::json;

TEST(RequestBody, CompletionsCarryIdsAndTheStreamingFields) {
    BenchPrompt prompt;
    prompt.ids = {5, 6, 7};
    prompt.output_len = 9;
    RequestBodyOptions options;
    options.model = "m";
    options.ignore_eos = true;
    const auto body = requestBody(prompt, options);
    ASSERT_TRUE(body.isOk()) << body.status().message();
    const json j = json::parse(*body);
    EXPECT_EQ(j["model"], "m");
    EXPECT_EQ(j["prompt"], json::array({5, 6, 7}));
    EXPECT_EQ(j["max_tokens"], 9);
    EXPECT_EQ(j["temperature"], 0.0);
    EXPECT_EQ(j["stream"], true);
    EXPECT_EQ(j["stream_options"]["include_usage"], true);
    EXPECT_EQ(j["ignore_eos"], true);
    EXPECT_EQ(j["return_token_ids"], true);
}

TEST(RequestBody, ChatSendsOneUserMessageAndExtraBodyFieldsWin) {
    BenchPrompt prompt;
    prompt.text = " the of";
    prompt.output_len = 4;
    RequestBodyOptions options;
    options.endpoint = BenchEndpoint::kChatCompletions;
    options.return_token_ids = false;
    options.extra_body = R"({"top_k": 5, "max_tokens": 2})";
    const json j = json::parse(*requestBody(prompt, options));
    EXPECT_EQ(j["messages"], json::parse(R"([{"role":"user","content":" the of"}])"));
    EXPECT_EQ(j["top_k"], 5);
    EXPECT_EQ(j["max_tokens"], 2);
    EXPECT_FALSE(j.contains("return_token_ids"));
    EXPECT_FALSE(j.contains("ignore_eos"));
    options.extra_body = "[1]";
    EXPECT_EQ(requestBody(prompt, options).status().code(), core::StatusCode::kInvalidArgument);
}

TEST(ParseStreamChunk, ReadsTextTokenIdsUsageErrorsAndDone) {
    auto c =
        parseStreamChunk(R"({"choices":[{"index":0,"text":"ab","token_ids":[1,2]}]})", BenchEndpoint::kCompletions);
    ASSERT_TRUE(c.isOk());
    EXPECT_TRUE(c->has_choice);
    EXPECT_TRUE(c->has_text);
    EXPECT_EQ(c->token_ids, 2);

    c = parseStreamChunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
                         BenchEndpoint::kChatCompletions);
    EXPECT_TRUE(c->has_choice);
    EXPECT_FALSE(c->has_text);
    EXPECT_FALSE(c->token_ids.has_value());

    c = parseStreamChunk(R"({"choices":[{"delta":{"content":"x"}}]})", BenchEndpoint::kChatCompletions);
    EXPECT_TRUE(c->has_text);

    c = parseStreamChunk(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})",
                         BenchEndpoint::kCompletions);
    EXPECT_FALSE(c->has_choice);
    EXPECT_EQ(c->prompt_tokens, 7);
    EXPECT_EQ(c->completion_tokens, 3);

    c = parseStreamChunk(R"({"error":{"message":"FFN peer lost","code":503}})", BenchEndpoint::kCompletions);
    EXPECT_EQ(c->error, "FFN peer lost");
    EXPECT_TRUE(parseStreamChunk("[DONE]", BenchEndpoint::kCompletions)->done);
    EXPECT_EQ(parseStreamChunk("not json", BenchEndpoint::kCompletions).status().code(), core::StatusCode::kCorrupt);
}

TEST(ErrorMessage, TakesTheOpenAiMessageElseTheBody) {
    EXPECT_EQ(errorMessage(R"({"error":{"message":"bad field","code":400}})"), "bad field");
    EXPECT_EQ(errorMessage(R"({"message":"plain"})"), "plain");
    EXPECT_EQ(errorMessage("Internal Server Error"), "Internal Server Error");
    EXPECT_EQ(errorMessage(""), "(empty body)");
}

TEST(FirstModel, TakesTheFirstIdOfTheList) {
    EXPECT_EQ(*firstModel(R"({"object":"list","data":[{"id":"qwen","object":"model"},{"id":"b"}]})"), "qwen");
    EXPECT_EQ(firstModel(R"({"data":[]})").status().code(), core::StatusCode::kCorrupt);
}

}  // namespace
}  // namespace afd::lab
