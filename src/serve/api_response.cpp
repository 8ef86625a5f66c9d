#include "serve/api_response.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <random>

#include "http/http_message.h"

namespace afd::serve {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json usageJson(const Usage& usage) {
    return {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

Json headJson(ApiEndpoint endpoint, const ResponseHead& head, bool chunk) {
    const char* object = endpoint == ApiEndpoint::kCompletions ? "text_completion"
                         : chunk                               ? "chat.completion.chunk"
                                                               : "chat.completion";
    return {{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model}};
}

Json finishJson(std::string_view reason) { return reason.empty() ? Json(nullptr) : Json(reason); }

}  // namespace

std::string newResponseId(ApiEndpoint endpoint) {
    static std::mutex mutex;
    static std::mt19937_64 rng{std::random_device{}()};
    uint64_t a = 0;
    uint64_t b = 0;
    {
        std::lock_guard lock(mutex);
        a = rng();
        b = rng();
    }
    return fmt::format("{}-{:016x}{:016x}", endpoint == ApiEndpoint::kCompletions ? "cmpl" : "chatcmpl", a, b);
}

std::string completionResponse(ApiEndpoint endpoint, const ResponseHead& head, const FinalChoice& choice,
                               const Usage& usage) {
    Json j = headJson(endpoint, head, false);
    Json c = {{"index", 0}};
    if (endpoint == ApiEndpoint::kCompletions) {
        c["text"] = choice.text;
        c["logprobs"] = nullptr;
        c["finish_reason"] = finishJson(choice.finish_reason);
        if (choice.with_token_ids && choice.prompt_ids != nullptr) c["prompt_token_ids"] = *choice.prompt_ids;
    } else {
        c["message"] = {{"role", "assistant"}, {"content", choice.text}};
        c["logprobs"] = nullptr;
        c["finish_reason"] = finishJson(choice.finish_reason);
        if (choice.with_token_ids && choice.prompt_ids != nullptr) j["prompt_token_ids"] = *choice.prompt_ids;
    }
    if (choice.with_token_ids && choice.token_ids != nullptr) c["token_ids"] = *choice.token_ids;
    j["choices"] = Json::array({std::move(c)});
    j["usage"] = usageJson(usage);
    return dump(j);
}

std::string streamChunk(ApiEndpoint endpoint, const ResponseHead& head, const ChunkChoice& choice) {
    Json j = headJson(endpoint, head, true);
    Json c = {{"index", 0}};
    const bool prompt_ids = choice.with_token_ids && choice.first && choice.prompt_ids != nullptr;
    if (endpoint == ApiEndpoint::kCompletions) {
        c["text"] = choice.text;
        if (prompt_ids) c["prompt_token_ids"] = *choice.prompt_ids;
    } else {
        Json delta = Json::object();
        if (choice.first) delta["role"] = "assistant";
        if (!choice.text.empty() || choice.first) delta["content"] = choice.text;
        c["delta"] = std::move(delta);
        if (prompt_ids) j["prompt_token_ids"] = *choice.prompt_ids;
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = finishJson(choice.finish_reason);
    if (choice.with_token_ids && choice.token_ids != nullptr) c["token_ids"] = *choice.token_ids;
    j["choices"] = Json::array({std::move(c)});
    return dump(j);
}

std::string usageChunk(ApiEndpoint endpoint, const ResponseHead& head, const Usage& usage) {
    Json j = headJson(endpoint, head, true);
    j["choices"] = Json::array();
    j["usage"] = usageJson(usage);
    return dump(j);
}

std::string apiErrorBody(const ApiError& error) {
    return http::errorBody(error.status, error.message, error.type, error.param);
}

}  // namespace afd::serve
