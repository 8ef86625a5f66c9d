// The JSON the API server answers with (OpenAI's objects, with vLLM's return_token_ids fields): whole responses
// (text_completion, chat.completion), stream chunks (text_completion, chat.completion.chunk) and the usage chunk.
// Pure functions; each returns compact JSON text (invalid UTF-8 replaced, never thrown).
//
// Where the token ids go (vLLM's layout): a completion's choice carries prompt_token_ids and token_ids; a chat
// completion carries prompt_token_ids at its top level and token_ids in its choice. In streams, each chunk's choice
// carries the token ids new in it, and the first chunk the prompt's ids (in its choice for completions, at its top
// level for chat).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/api_request.h"

namespace afd::serve {

// What every object of one response shares.
struct ResponseHead {
    std::string id;       // "cmpl-…" or "chatcmpl-…" (newResponseId)
    int64_t created = 0;  // Unix seconds
    std::string model;    // the served model's name
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
};

// A fresh id: "cmpl-" or "chatcmpl-" and 32 random hex digits. Thread-safe.
std::string newResponseId(ApiEndpoint endpoint);

// The whole response of a request that is not streamed. `prompt_ids` and `token_ids` are written only when
// `with_token_ids` (return_token_ids).
struct FinalChoice {
    std::string text;
    std::string_view finish_reason;  // "stop" or "length"
    const std::vector<int32_t>* prompt_ids = nullptr;
    const std::vector<int32_t>* token_ids = nullptr;
    bool with_token_ids = false;
};
std::string completionResponse(ApiEndpoint endpoint, const ResponseHead& head, const FinalChoice& choice,
                               const Usage& usage);

// One stream chunk. For chat, `first` adds delta.role "assistant"; `text` becomes delta.content (left out when
// empty) or the completion choice's text. An empty finish_reason is null.
struct ChunkChoice {
    std::string_view text;
    std::string_view finish_reason;
    bool first = false;
    const std::vector<int32_t>* prompt_ids = nullptr;  // written when with_token_ids and first
    const std::vector<int32_t>* token_ids = nullptr;   // written when with_token_ids
    bool with_token_ids = false;
};
std::string streamChunk(ApiEndpoint endpoint, const ResponseHead& head, const ChunkChoice& choice);

// The chunk stream_options.include_usage asks for: no choices, the usage.
std::string usageChunk(ApiEndpoint endpoint, const ResponseHead& head, const Usage& usage);

// An ApiError's body (http::errorBody with the field as param).
std::string apiErrorBody(const ApiError& error);

}  // namespace afd::serve
