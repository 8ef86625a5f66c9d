// The OpenAI-compatible requests of `afd bench serve` and the stream chunks it reads back: a streaming body for
// /v1/completions or /v1/chat/completions (the standard fields, plus vLLM's ignore_eos and return_token_ids, which
// vLLM, SGLang and afd serve take), and the parse of one "data:" event of the reply. Pure functions, no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "lab/serve/random_prompts.h"

namespace afd::lab {

enum class BenchEndpoint { kCompletions, kChatCompletions };

struct RequestBodyOptions {
    BenchEndpoint endpoint = BenchEndpoint::kCompletions;
    std::string model;
    double temperature = 0.0;
    bool ignore_eos = false;
    bool return_token_ids = true;
    std::string extra_body;  // a JSON object whose fields are added to (or replace) the body's; empty: none
};

// The body of one streaming request: model, prompt (completions: the ids, or the text) or messages (chat: one user
// message with the text; ids are refused there: AFD_CHECK), max_tokens = prompt.output_len, temperature, stream,
// stream_options.include_usage, ignore_eos when set, return_token_ids when set, then extra_body's fields.
// kInvalidArgument when extra_body is not a JSON object.
core::Result<std::string> requestBody(const BenchPrompt& prompt, const RequestBodyOptions& options);

// One event of a streamed reply.
struct StreamChunk {
    bool done = false;                 // the "[DONE]" sentinel
    std::string error;                 // an error event's message ({"error": {...}}); non-empty: the request failed
    bool has_choice = false;           // the event carried a choice
    bool has_text = false;             // its choice carried non-empty text (completions: text, chat: delta.content)
    std::optional<int64_t> token_ids;  // how many token ids the choice carried, when it had the field
    std::optional<int64_t> prompt_tokens;
    std::optional<int64_t> completion_tokens;  // usage, when the event had it (the final usage chunk)
};

// Parses the data of one event. kCorrupt when it is neither "[DONE]" nor a JSON object.
core::Result<StreamChunk> parseStreamChunk(std::string_view data, BenchEndpoint endpoint);

// The message of an OpenAI error body ({"error": {"message": ...}} or {"message": ...}, as servers differ), else
// the body itself cut to 200 bytes; "(empty body)" for none.
std::string errorMessage(std::string_view body);

// The first model of a GET /v1/models reply ({"data": [{"id": ...}, ...]}); kCorrupt when there is none.
core::Result<std::string> firstModel(std::string_view body);

}  // namespace afd::lab
