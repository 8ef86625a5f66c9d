// libFuzzer target: the API server's request parser (src/serve/api_request.h) on arbitrary bytes, as the body of
// POST /v1/chat/completions and of POST /v1/completions. Beyond "no crash, no sanitizer report, no exception":
//   - an accepted request is within every documented limit (max_tokens >= 1, temperature in [0, 2], top_p in
//     (0, 1], top_k >= -1, at most 4 non-empty stop strings, token ids in [0, 2^31 - 1], stream_options only with
//     stream, a non-empty prompt of ids, a non-empty conversation of known roles);
//   - apiRequestToJson of it parses back to the same request;
//   - a refusal is a 400 that names a field in `param` (a field called "" in the message only), or says the JSON is
//     malformed;
//   - an accepted chat renders through renderQwen3Chat and tokenizes, when the Qwen3 tokenizer is found (as
//     tokenizer_fuzz finds it: $AFD_TOKENIZER_JSON, third_party/tokenizer/, the fixtures beside the checkout).
// A violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/api_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using afd::serve::ApiEndpoint;
using afd::serve::ApiError;
using afd::serve::ApiRequest;

void require(bool condition) {
    if (!condition) __builtin_trap();
}

std::unique_ptr<afd::tokenizer::Tokenizer> loadTokenizer() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("AFD_TOKENIZER_JSON"); env != nullptr && *env != '\0')
        candidates.emplace_back(env);
#ifdef AFD_FUZZ_SOURCE_DIR
    candidates.push_back(std::string(AFD_FUZZ_SOURCE_DIR) + "/third_party/tokenizer/tokenizer.json");
    candidates.push_back(std::string(AFD_FUZZ_SOURCE_DIR) + "/../shared/fixtures/qwen3-tokenizer/tokenizer.json");
#endif
    for (const std::string& path : candidates) {
        if (!std::filesystem::is_regular_file(path)) continue;
        auto tok = afd::tokenizer::Tokenizer::fromFile(path);
        if (!tok.isOk()) {
            std::fprintf(stderr, "chat_request_fuzz: %s\n", tok.status().toString().c_str());
            std::abort();
        }
        std::fprintf(stderr, "chat_request_fuzz: rendering accepted chats with %s\n", path.c_str());
        return std::make_unique<afd::tokenizer::Tokenizer>(std::move(tok).value());
    }
    std::fprintf(stderr, "chat_request_fuzz: no tokenizer.json found; accepted chats are not rendered\n");
    return nullptr;
}

const afd::tokenizer::Tokenizer* g_tok = nullptr;

void checkLimits(const ApiRequest& r, ApiEndpoint endpoint) {
    require(r.endpoint == endpoint);
    require(!r.max_tokens || *r.max_tokens >= 1);
    require(!r.temperature || (*r.temperature >= 0.0 && *r.temperature <= afd::serve::kMaxTemperature));
    require(!r.top_p || (*r.top_p > 0.0 && *r.top_p <= 1.0));
    require(!r.top_k || *r.top_k >= -1);
    require(r.stop.size() <= static_cast<size_t>(afd::serve::kMaxStopStrings));
    for (const std::string& s : r.stop) require(!s.empty());
    for (const int32_t id : r.stop_token_ids) require(id >= 0);
    require(!r.include_usage || r.stream);
    if (endpoint == ApiEndpoint::kCompletions) {
        require(r.messages.empty() && r.tools.empty());
        if (!r.prompt_is_text) {
            require(!r.prompt_ids.empty() && r.prompt_text.empty());
            for (const int32_t id : r.prompt_ids) require(id >= 0);
        }
    } else {
        require(!r.messages.empty() && r.prompt_text.empty() && r.prompt_ids.empty());
        for (const auto& m : r.messages) {
            require(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool");
        }
    }
}

void checkBody(ApiEndpoint endpoint, std::string_view body) {
    std::variant<ApiRequest, ApiError> parsed = afd::serve::parseApiRequest(endpoint, body);
    if (const auto* error = std::get_if<ApiError>(&parsed)) {
        require(error->status == 400 && !error->message.empty());
        // An unknown field called "" is named in the message only (an empty param is null).
        require(!error->param.empty() || error->message.starts_with("malformed JSON") ||
                error->message == "unknown field \"\"");
        return;
    }
    const ApiRequest& request = std::get<ApiRequest>(parsed);
    checkLimits(request, endpoint);
    const std::string again = afd::serve::apiRequestToJson(request);
    std::variant<ApiRequest, ApiError> reparsed = afd::serve::parseApiRequest(endpoint, again);
    require(std::holds_alternative<ApiRequest>(reparsed));
    require(std::get<ApiRequest>(reparsed) == request);
    if (endpoint == ApiEndpoint::kChatCompletions && g_tok != nullptr) {
        auto text = afd::tokenizer::renderQwen3Chat(request.messages, afd::serve::chatRenderOptions(request));
        require(text.isOk());
        auto ids = g_tok->encode(*text, {.invalid_utf8 = afd::tokenizer::InvalidUtf8::kReplace});
        require(ids.isOk() && !ids->empty());
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
    static const std::unique_ptr<afd::tokenizer::Tokenizer> tokenizer = loadTokenizer();
    g_tok = tokenizer.get();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    checkBody(ApiEndpoint::kChatCompletions, body);
    checkBody(ApiEndpoint::kCompletions, body);
    return 0;
}
