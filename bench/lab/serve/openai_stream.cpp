#include "lab/serve/openai_stream.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace afd::lab {
namespace {

using nlohmann::json;

std::string cut(std::string_view text) {
    constexpr size_t kMaxShown = 200;
    return text.size() <= kMaxShown ? std::string(text) : std::string(text.substr(0, kMaxShown)) + "...";
}

// The message of an error object (or of a string error), or "".
std::string messageOf(const json& error) {
    if (error.is_string()) return error.get<std::string>();
    if (error.is_object()) {
        const auto message = error.find("message");
        if (message != error.end() && message->is_string()) return message->get<std::string>();
        return cut(error.dump());
    }
    return "";
}

std::optional<int64_t> integerField(const json& object, const char* name) {
    const auto it = object.find(name);
    if (it == object.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
}

}  // namespace

core::Result<std::string> requestBody(const BenchPrompt& prompt, const RequestBodyOptions& options) {
    json body;
    body["model"] = options.model;
    if (options.endpoint == BenchEndpoint::kCompletions) {
        if (prompt.ids.empty()) {
            body["prompt"] = prompt.text;
        } else {
            body["prompt"] = prompt.ids;
        }
    } else {
        AFD_CHECK(prompt.ids.empty(), "requestBody: a chat request takes a text prompt");
        body["messages"] = json::array({json{{"role", "user"}, {"content", prompt.text}}});
    }
    body["max_tokens"] = prompt.output_len;
    body["temperature"] = options.temperature;
    body["stream"] = true;
    body["stream_options"] = json{{"include_usage", true}};
    if (options.ignore_eos) body["ignore_eos"] = true;
    if (options.return_token_ids) body["return_token_ids"] = true;
    if (!options.extra_body.empty()) {
        const json extra = json::parse(options.extra_body, nullptr, false);
        if (extra.is_discarded() || !extra.is_object()) {
            return core::invalidArgument("--extra-body is not a JSON object: {}", cut(options.extra_body));
        }
        for (const auto& [key, value] : extra.items()) body[key] = value;
    }
    return body.dump();
}

core::Result<StreamChunk> parseStreamChunk(std::string_view data, BenchEndpoint endpoint) {
    StreamChunk chunk;
    if (data == "[DONE]") {
        chunk.done = true;
        return chunk;
    }
    const json event = json::parse(data, nullptr, false);
    if (event.is_discarded() || !event.is_object()) {
        return core::corrupt("a stream event is not a JSON object: {}", cut(data));
    }
    if (const auto error = event.find("error"); error != event.end() && !error->is_null()) {
        chunk.error = messageOf(*error);
        if (chunk.error.empty()) chunk.error = "an error event without a message";
        return chunk;
    }
    if (const auto usage = event.find("usage"); usage != event.end() && usage->is_object()) {
        chunk.prompt_tokens = integerField(*usage, "prompt_tokens");
        chunk.completion_tokens = integerField(*usage, "completion_tokens");
    }
    const auto choices = event.find("choices");
    if (choices == event.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) {
        return chunk;
    }
    const json& choice = (*choices)[0];
    chunk.has_choice = true;
    const json* text = nullptr;
    if (endpoint == BenchEndpoint::kCompletions) {
        if (const auto it = choice.find("text"); it != choice.end()) text = &*it;
    } else if (const auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
        if (const auto it = delta->find("content"); it != delta->end()) text = &*it;
    }
    chunk.has_text = text != nullptr && text->is_string() && !text->get_ref<const std::string&>().empty();
    if (const auto ids = choice.find("token_ids"); ids != choice.end() && ids->is_array()) {
        chunk.token_ids = static_cast<int64_t>(ids->size());
    }
    return chunk;
}

std::string errorMessage(std::string_view body) {
    if (body.empty()) return "(empty body)";
    const json parsed = json::parse(body, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) {
        if (const auto error = parsed.find("error"); error != parsed.end()) {
            std::string message = messageOf(*error);
            if (!message.empty()) return message;
        }
        if (const auto message = parsed.find("message"); message != parsed.end() && message->is_string()) {
            return message->get<std::string>();
        }
    }
    return cut(body);
}

core::Result<std::string> firstModel(std::string_view body) {
    const json parsed = json::parse(body, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) {
        const auto data = parsed.find("data");
        if (data != parsed.end() && data->is_array() && !data->empty() && (*data)[0].is_object()) {
            const auto id = (*data)[0].find("id");
            if (id != (*data)[0].end() && id->is_string()) return id->get<std::string>();
        }
    }
    return core::corrupt("GET /v1/models named no model: {}", cut(body));
}

}  // namespace afd::lab
