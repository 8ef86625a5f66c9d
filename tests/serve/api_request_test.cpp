// parseApiRequest: every field of both endpoints, and every refusal naming its field; apiRequestToJson round trips.
#include "serve/api_request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include "serve/api_response.h"

namespace afd::serve {
namespace {

using nlohmann::json;

ApiRequest accepted(ApiEndpoint endpoint, const std::string& body) {
    auto parsed = parseApiRequest(endpoint, body);
    if (auto* error = std::get_if<ApiError>(&parsed)) {
        ADD_FAILURE() << body << " refused: " << error->message;
        return {};
    }
    ApiRequest request = std::get<ApiRequest>(parsed);
    // Every accepted request re-serialises to a body that parses to the same request.
    auto again = parseApiRequest(endpoint, apiRequestToJson(request));
    EXPECT_TRUE(std::holds_alternative<ApiRequest>(again)) << apiRequestToJson(request);
    if (auto* r = std::get_if<ApiRequest>(&again)) {
        EXPECT_TRUE(*r == request) << apiRequestToJson(request);
    }
    return request;
}

ApiError refused(ApiEndpoint endpoint, const std::string& body) {
    auto parsed = parseApiRequest(endpoint, body);
    if (!std::holds_alternative<ApiError>(parsed)) {
        ADD_FAILURE() << body << " accepted";
        return {};
    }
    ApiError error = std::get<ApiError>(parsed);
    EXPECT_EQ(error.status, 400);
    return error;
}

ApiRequest completion(const std::string& fields) {
    return accepted(ApiEndpoint::kCompletions, R"({"prompt": "hi")" + (fields.empty() ? "" : ", " + fields) + "}");
}
ApiError completionRefused(const std::string& fields) {
    return refused(ApiEndpoint::kCompletions, R"({"prompt": "hi", )" + fields + "}");
}
constexpr const char* kUser = R"("messages": [{"role": "user", "content": "hello"}])";
ApiRequest chat(const std::string& fields) {
    return accepted(ApiEndpoint::kChatCompletions,
                    std::string("{") + kUser + (fields.empty() ? "" : ", " + fields) + "}");
}
ApiError chatRefused(const std::string& fields) {
    return refused(ApiEndpoint::kChatCompletions, std::string("{") + kUser + ", " + fields + "}");
}

TEST(ApiRequestTest, CompletionDefaults) {
    const ApiRequest r = completion("");
    EXPECT_EQ(r.endpoint, ApiEndpoint::kCompletions);
    EXPECT_TRUE(r.prompt_is_text);
    EXPECT_EQ(r.prompt_text, "hi");
    EXPECT_TRUE(r.model.empty());
    EXPECT_FALSE(r.max_tokens || r.temperature || r.top_p || r.top_k || r.seed);
    EXPECT_TRUE(r.stop.empty());
    EXPECT_FALSE(r.stream || r.include_usage || r.return_token_ids || r.ignore_eos);
    EXPECT_TRUE(r.skip_special_tokens);
}

TEST(ApiRequestTest, PromptForms) {
    EXPECT_EQ(completion("").prompt_text, "hi");
    const ApiRequest one_string = accepted(ApiEndpoint::kCompletions, R"({"prompt": ["a b"]})");
    EXPECT_TRUE(one_string.prompt_is_text);
    EXPECT_EQ(one_string.prompt_text, "a b");
    const ApiRequest ids = accepted(ApiEndpoint::kCompletions, R"({"prompt": [1, 2, 2147483647]})");
    EXPECT_FALSE(ids.prompt_is_text);
    EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 2147483647}));
    const ApiRequest nested = accepted(ApiEndpoint::kCompletions, R"({"prompt": [[5, 6]]})");
    EXPECT_FALSE(nested.prompt_is_text);
    EXPECT_EQ(nested.prompt_ids, (std::vector<int32_t>{5, 6}));

    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": ["a", "b"]})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [[1], [2]]})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": []})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [[]]})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [[]], "stream": true})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": 5})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [1, -1]})").param, "prompt[1]");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [1, 2147483648]})").param, "prompt[1]");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [1, 1.5]})").param, "prompt[1]");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": [[1, "x"]]})").param, "prompt[0][1]");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"prompt": null})").param, "prompt");
    EXPECT_EQ(refused(ApiEndpoint::kCompletions, R"({"model": "m"})").param, "prompt");
}

TEST(ApiRequestTest, SamplingFields) {
    const ApiRequest r = completion(
        R"("model": "m", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": -3, "n": 1,
            "stop": ["x", "yz"], "stop_token_ids": [3, 4], "ignore_eos": true, "skip_special_tokens": false,
            "return_token_ids": true, "stream": true, "stream_options": {"include_usage": true})");
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_EQ(r.temperature, 0.5);
    EXPECT_EQ(r.top_p, 0.9);
    EXPECT_EQ(r.top_k, 40);
    EXPECT_EQ(r.seed, -3);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
    EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{3, 4}));
    EXPECT_TRUE(r.ignore_eos);
    EXPECT_FALSE(r.skip_special_tokens);
    EXPECT_TRUE(r.return_token_ids && r.stream && r.include_usage);

    EXPECT_EQ(completion(R"("stop": "end")").stop, std::vector<std::string>{"end"});
    EXPECT_EQ(completion(R"("top_k": -1)").top_k, -1);
    EXPECT_EQ(completion(R"("temperature": 0)").temperature, 0.0);
    EXPECT_EQ(completion(R"("temperature": 2)").temperature, 2.0);
    // null is absent.
    const ApiRequest nulls = completion(R"("max_tokens": null, "stop": null, "stream": null, "seed": null)");
    EXPECT_FALSE(nulls.max_tokens || nulls.seed || nulls.stream);
}

TEST(ApiRequestTest, RefusalsNameTheField) {
    struct Case {
        const char* fields;
        const char* param;
        const char* says;  // part of the message
    };
    const Case cases[] = {
        {R"("max_tokens": 0)", "max_tokens", "in [1,"},
        {R"("max_tokens": 2.0)", "max_tokens", "an integer"},
        {R"("max_tokens": "5")", "max_tokens", "an integer"},
        {R"("max_tokens": 18446744073709551615)", "max_tokens", "in [1,"},
        {R"("temperature": -0.1)", "temperature", "in [0, 2]"},
        {R"("temperature": 2.5)", "temperature", "in [0, 2]"},
        {R"("temperature": "hot")", "temperature", "a number"},
        {R"("top_p": 0)", "top_p", "in (0, 1]"},
        {R"("top_p": 1.1)", "top_p", "in (0, 1]"},
        {R"("top_k": -2)", "top_k", "in [-1,"},
        {R"("top_k": 1.5)", "top_k", "an integer"},
        {R"("seed": 1e3)", "seed", "an integer"},
        {R"("n": 2)", "n", "n must be 1"},
        {R"("n": true)", "n", "an integer"},
        {R"("stop": 5)", "stop", "a string or a list"},
        {R"("stop": ["a", 1])", "stop[1]", "a string"},
        {R"("stop": ["a", "b", "c", "d", "e"])", "stop", "at most 4"},
        {R"("stop": "")", "stop", "must not be empty"},
        {R"("stop": ["a", ""])", "stop[1]", "must not be empty"},
        {R"("stop_token_ids": [1, -5])", "stop_token_ids[1]", "in [0,"},
        {R"("stop_token_ids": 3)", "stop_token_ids", "a list of token ids"},
        {R"("ignore_eos": 1)", "ignore_eos", "a boolean"},
        {R"("skip_special_tokens": "no")", "skip_special_tokens", "a boolean"},
        {R"("return_token_ids": 0)", "return_token_ids", "a boolean"},
        {R"("stream": "true")", "stream", "a boolean"},
        {R"("stream_options": {"include_usage": true})", "stream_options", "only allowed when stream"},
        {R"("stream": true, "stream_options": {"include_usage": 1})", "stream_options.include_usage", "a boolean"},
        {R"("stream": true, "stream_options": {"continuous_usage_stats": true})",
         "stream_options.continuous_usage_stats", "unknown field"},
        {R"("stream": true, "stream_options": [])", "stream_options", "an object"},
        {R"("model": 3)", "model", "a string"},
        {R"("logprobs": 1)", "logprobs", "unknown field"},
        {R"("echo": true)", "echo", "unknown field"},
        {R"("messages": [])", "messages", "unknown field"},
        {R"("": 1)", "", "unknown field \"\""},
    };
    for (const Case& c : cases) {
        const ApiError error = completionRefused(c.fields);
        EXPECT_EQ(error.param, c.param) << c.fields;
        EXPECT_NE(error.message.find(c.says), std::string::npos) << c.fields << ": " << error.message;
    }
}

TEST(ApiRequestTest, MalformedJson) {
    for (const char* body :
         {"", "{", "not json", R"({"prompt": "a",})", "[1, 2]", "\"text\"", "null", "{\"prompt\": \"\xff\"}"}) {
        const ApiError error = refused(ApiEndpoint::kCompletions, body);
        EXPECT_TRUE(error.param.empty()) << body;
        EXPECT_NE(error.message.find("malformed JSON"), std::string::npos) << body << ": " << error.message;
    }
    // Nesting beyond the bound is malformed too (and never recursed into).
    const std::string deep = R"({"prompt": "a", "tools": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
    EXPECT_NE(refused(ApiEndpoint::kCompletions, deep).message.find("malformed JSON"), std::string::npos);
}

TEST(ApiRequestTest, ChatFields) {
    const ApiRequest r = chat(
        R"("max_completion_tokens": 9, "add_generation_prompt": false,
            "chat_template_kwargs": {"enable_thinking": false},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}])");
    EXPECT_EQ(r.endpoint, ApiEndpoint::kChatCompletions);
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0].role, "user");
    EXPECT_EQ(r.messages[0].content, "hello");
    EXPECT_EQ(r.max_tokens, 9);
    EXPECT_FALSE(r.add_generation_prompt);
    EXPECT_FALSE(r.enable_thinking);
    ASSERT_EQ(r.tools.size(), 1u);
    // Key order kept; rendered in Python's json.dumps form.
    EXPECT_EQ(chatRenderOptions(r).tools[0],
              R"({"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}})");
    EXPECT_EQ(chat(R"("max_tokens": 4)").max_tokens, 4);
    EXPECT_EQ(chat(R"("max_tokens": 4, "max_completion_tokens": 6)").max_tokens, 6);
    const ApiRequest defaults = chat("");
    EXPECT_TRUE(defaults.add_generation_prompt);
    EXPECT_TRUE(defaults.enable_thinking);
}

TEST(ApiRequestTest, ChatMessages) {
    const ApiRequest r = accepted(ApiEndpoint::kChatCompletions, R"({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": null, "reasoning_content": "hmm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}]})");
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[1].content, "one\ntwo");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_EQ(r.messages[2].reasoning_content, "hmm");
    ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[2].tool_calls[0].name, "f");
    EXPECT_EQ(r.messages[2].tool_calls[0].arguments, "{\"x\": 1}");
    EXPECT_EQ(r.messages[3].role, "tool");

    struct Case {
        const char* messages;
        const char* param;
    };
    const Case cases[] = {
        {R"([])", "messages"},
        {R"({"role": "user"})", "messages"},
        {R"([5])", "messages[0]"},
        {R"([{"content": "x"}])", "messages[0].role"},
        {R"([{"role": "robot", "content": "x"}])", "messages[0].role"},
        {R"([{"role": "user", "content": 5}])", "messages[0].content"},
        {R"([{"role": "user", "content": "x", "extra": 1}])", "messages[0].extra"},
        {R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])",
         "messages[0].content[0].image_url"},
        {R"([{"role": "user", "content": [{"type": "image"}]}])", "messages[0].content[0].type"},
        {R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text"},
        {R"([{"role": "user", "content": [{"type": "text", "text": 1}]}])", "messages[0].content[0].text"},
        {R"([{"role": "user", "name": 1}])", "messages[0].name"},
        {R"([{"role": "assistant", "tool_calls": 3}])", "messages"},
        {R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])", "messages"},
    };
    for (const Case& c : cases) {
        const ApiError error =
            refused(ApiEndpoint::kChatCompletions, std::string(R"({"messages": )") + c.messages + "}");
        EXPECT_EQ(error.param, c.param) << c.messages << ": " << error.message;
    }
    EXPECT_EQ(refused(ApiEndpoint::kChatCompletions, "{}").param, "messages");
    EXPECT_EQ(chatRefused(R"("prompt": "x")").param, "prompt");
    EXPECT_EQ(chatRefused(R"("chat_template_kwargs": {"foo": 1})").param, "chat_template_kwargs.foo");
    EXPECT_EQ(chatRefused(R"("chat_template_kwargs": {"enable_thinking": "no"})").param,
              "chat_template_kwargs.enable_thinking");
    EXPECT_EQ(chatRefused(R"("tools": {})").param, "tools");
    EXPECT_EQ(chatRefused(R"("tools": [1])").param, "tools[0]");
    EXPECT_EQ(chatRefused(R"("add_generation_prompt": 1)").param, "add_generation_prompt");
    EXPECT_EQ(chatRefused(R"("max_completion_tokens": 0)").param, "max_completion_tokens");
}

TEST(ApiRequestTest, ErrorBodyCarriesTheParam) {
    const ApiError error = completionRefused(R"("top_p": 3)");
    const json body = json::parse(apiErrorBody(error));
    EXPECT_EQ(body["error"]["param"], "top_p");
    EXPECT_EQ(body["error"]["code"], 400);
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["message"], error.message);
    const ApiError malformed = refused(ApiEndpoint::kCompletions, "{");
    EXPECT_TRUE(json::parse(apiErrorBody(malformed))["error"]["param"].is_null());
}

// The fuzz target's seeds (fuzz/corpus/chat_request/) get the answers they were made for: "refused_*" and
// "malformed*" are refused, the others accepted by the endpoint their name says.
TEST(ApiRequestTest, FuzzSeeds) {
    const std::filesystem::path dir =
        std::filesystem::path(AFD_TEST_DATA) / ".." / ".." / "fuzz" / "corpus" / "chat_request";
    int seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        const std::string name = entry.path().filename().string();
        const ApiEndpoint endpoint =
            name.starts_with("completion") ? ApiEndpoint::kCompletions : ApiEndpoint::kChatCompletions;
        if (name.starts_with("refused") || name.starts_with("malformed")) {
            refused(endpoint, text.str());
        } else {
            accepted(endpoint, text.str());
        }
        ++seeds;
    }
    EXPECT_GE(seeds, 8);
}

}  // namespace
}  // namespace afd::serve
