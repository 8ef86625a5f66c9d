// The bodies of POST /v1/completions and POST /v1/chat/completions (OpenAI's API, with vLLM's extensions) parsed
// into a validated ApiRequest: pure functions on bytes, no sockets, no tokenizer. docs/serving.md lists the fields.
//
// The rules, as vLLM applies them in its strict mode:
//   - the body is a JSON object (nested at most 64 levels); anything else is 400 "malformed JSON";
//   - every field is known (unknown fields, nested ones included, are 400 naming the field: "unknown field X");
//   - a field that is null is the same as an absent one (OpenAI's optional fields);
//   - types are JSON's own: an integer is a JSON integer (not 2.0, not "2"), a boolean true or false, a number any
//     JSON number; a wrong type is 400 "<field> must be <rule>, got <value>";
//   - ranges: max_tokens (and chat's max_completion_tokens) >= 1; temperature in [0, 2]; top_p in (0, 1]; top_k
//     -1 (off, as vLLM's), 0 (off) or >= 1; n 1; stop a string or up to 4 non-empty strings; token ids (prompt,
//     stop_token_ids) in [0, 2^31 - 1] (the vocabulary is the engine's check); stream_options only with stream.
//   - completions: prompt is a string, an array of one string, an array of token ids or an array of one array of
//     token ids; more prompts than one is 400 (n = 1 only). chat: messages is a non-empty array of
//     {role: system|user|assistant|tool, content: string | null | [{type: "text", text}], name, tool_calls,
//     tool_call_id, reasoning_content}; text parts are joined with "\n" (as vLLM joins them).
// The served model's name is the caller's check (the field is kept as given).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tokenizer/chat_template.h"

namespace afd::serve {

enum class ApiEndpoint { kCompletions, kChatCompletions };

// "completions" or "chat_completions" (RequestRecord::endpoint, metrics labels).
std::string_view endpointName(ApiEndpoint endpoint);

// A refusal to answer with an OpenAI error body: the HTTP status, the message, the field at fault (empty: none) and
// the error type (empty: http::defaultErrorType).
struct ApiError {
    int status = 400;
    std::string message;
    std::string param;
    std::string type;
};

// The limits of the request fields that are not the engine's.
inline constexpr int kMaxStopStrings = 4;
inline constexpr int kMaxJsonDepth = 64;
inline constexpr double kMaxTemperature = 2.0;

struct ApiRequest {
    ApiEndpoint endpoint = ApiEndpoint::kCompletions;
    std::string model;  // empty when absent (the served model)

    // completions: the prompt as text or as token ids (exactly one is used: prompt_is_text says which).
    bool prompt_is_text = true;
    std::string prompt_text;
    std::vector<int32_t> prompt_ids;

    // chat: the conversation and how the template renders it.
    std::vector<tokenizer::ChatMessage> messages;
    std::vector<std::string> tools;  // each tool's compact JSON text, in order (rendered in Python's json.dumps form)
    bool add_generation_prompt = true;
    bool enable_thinking = true;  // chat_template_kwargs.enable_thinking

    // Sampling; absent values take the server's defaults (max_tokens: 16 for completions, the rest of the context
    // for chat).
    std::optional<int64_t> max_tokens;
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int64_t> top_k;  // -1 is kept as given (off)
    std::optional<int64_t> seed;
    std::vector<std::string> stop;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    bool skip_special_tokens = true;

    bool stream = false;
    bool include_usage = false;     // stream_options.include_usage
    bool return_token_ids = false;  // vLLM's: token ids in the choices (and the prompt's)

    bool operator==(const ApiRequest& other) const;
};

// Parses a body for `endpoint`. Errors are 400 with the field in `param` (malformed JSON has none).
std::variant<ApiRequest, ApiError> parseApiRequest(ApiEndpoint endpoint, std::string_view body);

// A body that parses back to `request` (for the fuzz target and tests): every field written explicitly.
std::string apiRequestToJson(const ApiRequest& request);

// The request's chat rendering options (tools in Python's json.dumps form).
tokenizer::ChatRenderOptions chatRenderOptions(const ApiRequest& request);

}  // namespace afd::serve
