#include "serve/api_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "tokenizer/chat_json.h"
#include "tokenizer/python_json.h"

namespace afd::serve {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// A value as messages show it: its JSON type and text, cut after 64 characters.
std::string shown(const Json& value) {
    std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (text.size() > 64) text = text.substr(0, 64) + "...";
    const char* type = value.is_number() ? "number" : value.type_name();
    return value.is_null() ? std::string("null") : fmt::format("{} {}", type, text);
}

std::string fieldName(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

bool isInteger(const Json& value) { return value.is_number_integer() || value.is_number_unsigned(); }

// Reads the fields of one request; the first refusal is kept in error_ and every later read is skipped.
class RequestParser {
public:
    bool failed() const { return error_.has_value(); }
    ApiError error() const { return *error_; }

    bool fail(std::string param, std::string message) {
        if (!error_) error_ = ApiError{400, std::move(message), std::move(param), {}};
        return false;
    }
    bool typeError(const std::string& name, std::string_view rule, const Json& value) {
        return fail(name, fmt::format("{} must be {}, got {}", name, rule, shown(value)));
    }

    // The object at `name`, with only `known` keys.
    bool object(const Json& value, const std::string& name, std::initializer_list<std::string_view> known) {
        if (failed()) return false;
        if (!value.is_object()) return typeError(name, "an object", value);
        for (const auto& [key, unused] : value.items()) {
            if (std::find(known.begin(), known.end(), key) == known.end()) {
                const std::string field = fieldName(name, key);
                return fail(field, fmt::format("unknown field \"{}\"", field));
            }
        }
        return true;
    }

    // The field `key` of `object`, nullptr when absent or null.
    static const Json* find(const Json& object, std::string_view key) {
        const auto it = object.find(key);
        return it == object.end() || it->is_null() ? nullptr : &*it;
    }

    bool readBool(const Json& object, std::string_view path, std::string_view key, bool* out) {
        const Json* v = find(object, key);
        if (failed() || v == nullptr) return !failed();
        if (!v->is_boolean()) return typeError(fieldName(path, key), "a boolean", *v);
        *out = v->get<bool>();
        return true;
    }

    bool intValue(const Json& v, const std::string& name, int64_t min, int64_t max, int64_t* out) {
        if (!isInteger(v)) return typeError(name, "an integer", v);
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kInt64Max)) {
            return fail(name, fmt::format("{} must be in [{}, {}], got {}", name, min, max, shown(v)));
        }
        const int64_t value = v.get<int64_t>();
        if (value < min || value > max) {
            return fail(name, fmt::format("{} must be in [{}, {}], got {}", name, min, max, value));
        }
        *out = value;
        return true;
    }

    bool readInt(const Json& object, std::string_view path, std::string_view key, int64_t min, int64_t max,
                 std::optional<int64_t>* out) {
        const Json* v = find(object, key);
        if (failed() || v == nullptr) return !failed();
        int64_t value = 0;
        if (!intValue(*v, fieldName(path, key), min, max, &value)) return false;
        *out = value;
        return true;
    }

    // A number; `rule` says the range the caller checks with `in_range`.
    template <typename InRange>
    bool readNumber(const Json& object, std::string_view key, std::string_view rule, InRange in_range,
                    std::optional<double>* out) {
        const Json* v = find(object, key);
        if (failed() || v == nullptr) return !failed();
        const std::string name(key);
        if (!v->is_number()) return typeError(name, "a number", *v);
        const double value = v->get<double>();
        if (!std::isfinite(value) || !in_range(value)) {
            return fail(name, fmt::format("{} must be {}, got {}", name, rule, shown(*v)));
        }
        *out = value;
        return true;
    }

    bool tokenIds(const Json& v, const std::string& name, std::vector<int32_t>* out) {
        if (!v.is_array()) return typeError(name, "a list of token ids", v);
        out->clear();
        out->reserve(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
            int64_t id = 0;
            if (!intValue(v[i], fmt::format("{}[{}]", name, i), 0, kMaxTokenId, &id)) return false;
            out->push_back(static_cast<int32_t>(id));
        }
        return true;
    }

    void common(const Json& body, ApiRequest* r) {
        if (const Json* model = find(body, "model")) {
            if (!model->is_string()) {
                typeError("model", "a string", *model);
                return;
            }
            r->model = model->get<std::string>();
        }
        readInt(body, "", "max_tokens", 1, kInt64Max, &r->max_tokens);
        readNumber(
            body, "temperature", "in [0, 2]", [](double t) { return t >= 0.0 && t <= kMaxTemperature; },
            &r->temperature);
        readNumber(
            body, "top_p", "in (0, 1]", [](double p) { return p > 0.0 && p <= 1.0; }, &r->top_p);
        if (const Json* top_k = find(body, "top_k"); top_k != nullptr && !failed()) {
            int64_t k = 0;
            if (intValue(*top_k, "top_k", -1, kInt64Max, &k)) r->top_k = k;
        }
        readInt(body, "", "seed", kInt64Min, kInt64Max, &r->seed);
        if (const Json* n = find(body, "n"); n != nullptr && !failed()) {
            if (!isInteger(*n)) {
                typeError("n", "an integer", *n);
            } else if (!(n->is_number_unsigned() ? n->get<uint64_t>() == 1 : n->get<int64_t>() == 1)) {
                fail("n", fmt::format("n must be 1 (one choice per request), got {}", shown(*n)));
            }
        }
        stopStrings(body, r);
        if (const Json* ids = find(body, "stop_token_ids"); ids != nullptr && !failed()) {
            tokenIds(*ids, "stop_token_ids", &r->stop_token_ids);
        }
        readBool(body, "", "ignore_eos", &r->ignore_eos);
        readBool(body, "", "skip_special_tokens", &r->skip_special_tokens);
        readBool(body, "", "return_token_ids", &r->return_token_ids);
        readBool(body, "", "stream", &r->stream);
        if (const Json* options = find(body, "stream_options"); options != nullptr && !failed()) {
            if (!r->stream) {
                fail("stream_options", "stream_options is only allowed when stream is true");
                return;
            }
            if (object(*options, "stream_options", {"include_usage"})) {
                readBool(*options, "stream_options", "include_usage", &r->include_usage);
            }
        }
    }

    void stopStrings(const Json& body, ApiRequest* r) {
        const Json* stop = find(body, "stop");
        if (failed() || stop == nullptr) return;
        if (stop->is_string()) {
            r->stop = {stop->get<std::string>()};
        } else if (stop->is_array()) {
            if (stop->size() > kMaxStopStrings) {
                fail("stop", fmt::format("stop takes at most {} strings, got {}", kMaxStopStrings, stop->size()));
                return;
            }
            for (size_t i = 0; i < stop->size(); ++i) {
                const Json& s = (*stop)[i];
                if (!s.is_string()) {
                    typeError(fmt::format("stop[{}]", i), "a string", s);
                    return;
                }
                r->stop.push_back(s.get<std::string>());
            }
        } else {
            typeError("stop", "a string or a list of strings", *stop);
            return;
        }
        for (size_t i = 0; i < r->stop.size(); ++i) {
            if (r->stop[i].empty()) {
                fail(stop->is_string() ? "stop" : fmt::format("stop[{}]", i), "a stop string must not be empty");
                return;
            }
        }
    }

    void prompt(const Json& body, ApiRequest* r) {
        const Json* p = find(body, "prompt");
        if (failed()) return;
        if (p == nullptr) {
            fail("prompt", "prompt is required");
            return;
        }
        const auto one_prompt_only = [&](size_t n) {
            return fail("prompt", fmt::format("prompt must hold one prompt (n = 1 only), got {}", n));
        };
        if (p->is_string()) {
            r->prompt_text = p->get<std::string>();
            return;
        }
        if (!p->is_array() || p->empty()) {
            typeError("prompt", "a string, a list of token ids, or a list of one of either", *p);
            return;
        }
        const Json& first = (*p)[0];
        if (first.is_string() || first.is_array()) {
            if (p->size() != 1) {
                one_prompt_only(p->size());
                return;
            }
            if (first.is_string()) {
                r->prompt_text = first.get<std::string>();
                return;
            }
            if (first.empty()) {
                fail("prompt", "prompt[0] must hold at least one token id");
                return;
            }
            r->prompt_is_text = false;
            tokenIds(first, "prompt[0]", &r->prompt_ids);
            return;
        }
        r->prompt_is_text = false;
        tokenIds(*p, "prompt", &r->prompt_ids);
    }

    // The text of a message's content: a string, or text parts joined with "\n".
    bool content(const Json& m, const std::string& name, std::string* out) {
        const Json* c = find(m, "content");
        if (c == nullptr) return true;
        const std::string cname = name + ".content";
        if (c->is_string()) {
            *out = c->get<std::string>();
            return true;
        }
        if (!c->is_array()) return typeError(cname, "a string, null or a list of text parts", *c);
        for (size_t i = 0; i < c->size(); ++i) {
            const std::string pname = fmt::format("{}[{}]", cname, i);
            const Json& part = (*c)[i];
            if (!object(part, pname, {"type", "text"})) return false;
            const Json* type = find(part, "type");
            if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
                return fail(pname + ".type",
                            fmt::format("{}.type must be \"text\" (only text content is served)", pname));
            }
            const Json* text = find(part, "text");
            if (text == nullptr || !text->is_string()) {
                return typeError(pname + ".text", "a string", text == nullptr ? Json() : *text);
            }
            if (i > 0) *out += '\n';
            *out += text->get<std::string>();
        }
        return true;
    }

    void messages(const Json& body, ApiRequest* r) {
        const Json* ms = find(body, "messages");
        if (failed()) return;
        if (ms == nullptr) {
            fail("messages", "messages is required");
            return;
        }
        if (!ms->is_array()) {
            typeError("messages", "a list of messages", *ms);
            return;
        }
        if (ms->empty()) {
            fail("messages", "messages must hold at least one message");
            return;
        }
        // Each message normalised (content as one string) for the tokenizer's reader of tool calls.
        Json normalised = Json::array();
        for (size_t i = 0; i < ms->size(); ++i) {
            const std::string name = fmt::format("messages[{}]", i);
            const Json& m = (*ms)[i];
            if (!object(m, name, {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"})) {
                return;
            }
            const Json* role = find(m, "role");
            static constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool"};
            if (role == nullptr || !role->is_string() ||
                std::find(std::begin(kRoles), std::end(kRoles), role->get<std::string>()) == std::end(kRoles)) {
                fail(name + ".role", fmt::format("{}.role must be one of system, user, assistant, tool, got {}", name,
                                                 role == nullptr ? std::string("nothing") : shown(*role)));
                return;
            }
            for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
                if (const Json* v = find(m, key); v != nullptr && !v->is_string()) {
                    typeError(fieldName(name, key), "a string", *v);
                    return;
                }
            }
            std::string text;
            if (!content(m, name, &text)) return;
            Json out = {{"role", *role}, {"content", text}};
            if (const Json* reasoning = find(m, "reasoning_content")) out["reasoning_content"] = *reasoning;
            if (const Json* calls = find(m, "tool_calls")) out["tool_calls"] = *calls;
            normalised.push_back(std::move(out));
        }
        core::Result<std::vector<tokenizer::ChatMessage>> parsed = tokenizer::chatMessagesFromJson(normalised);
        if (!parsed.isOk()) {
            fail("messages", parsed.status().message());
            return;
        }
        r->messages = std::move(parsed).value();
    }

    void chatFields(const Json& body, ApiRequest* r) {
        // max_completion_tokens is OpenAI's newer name; it wins over max_tokens, as in vLLM.
        readInt(body, "", "max_completion_tokens", 1, kInt64Max, &r->max_tokens);
        readBool(body, "", "add_generation_prompt", &r->add_generation_prompt);
        if (const Json* kwargs = find(body, "chat_template_kwargs"); kwargs != nullptr && !failed()) {
            if (object(*kwargs, "chat_template_kwargs", {"enable_thinking"})) {
                readBool(*kwargs, "chat_template_kwargs", "enable_thinking", &r->enable_thinking);
            }
        }
        if (const Json* tools = find(body, "tools"); tools != nullptr && !failed()) {
            if (!tools->is_array()) {
                typeError("tools", "a list of tools", *tools);
                return;
            }
            for (size_t i = 0; i < tools->size(); ++i) {
                if (!(*tools)[i].is_object()) {
                    typeError(fmt::format("tools[{}]", i), "an object", (*tools)[i]);
                    return;
                }
                r->tools.push_back((*tools)[i].dump(-1, ' ', false, Json::error_handler_t::replace));
            }
        }
        messages(body, r);
    }

private:
    std::optional<ApiError> error_;
};

constexpr std::string_view kCommonFields[] = {"model",
                                              "max_tokens",
                                              "temperature",
                                              "top_p",
                                              "top_k",
                                              "seed",
                                              "n",
                                              "stop",
                                              "stop_token_ids",
                                              "ignore_eos",
                                              "skip_special_tokens",
                                              "return_token_ids",
                                              "stream",
                                              "stream_options"};

std::optional<Json> parseJson(std::string_view body) {
    bool too_deep = false;
    const Json::parser_callback_t callback = [&too_deep](int depth, Json::parse_event_t event, Json& /*parsed*/) {
        const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
        if (!opens || depth < kMaxJsonDepth) return true;
        too_deep = true;
        return false;
    };
    try {
        Json document = Json::parse(body.begin(), body.end(), callback);
        if (too_deep) return std::nullopt;
        return document;
    } catch (const Json::exception&) {
        return std::nullopt;
    }
}

}  // namespace

std::string_view endpointName(ApiEndpoint endpoint) {
    return endpoint == ApiEndpoint::kCompletions ? "completions" : "chat_completions";
}

bool ApiRequest::operator==(const ApiRequest& o) const {
    const auto same_messages = [](const std::vector<tokenizer::ChatMessage>& a,
                                  const std::vector<tokenizer::ChatMessage>& b) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
            if (a[i].role != b[i].role || a[i].content != b[i].content ||
                a[i].reasoning_content != b[i].reasoning_content || a[i].tool_calls.size() != b[i].tool_calls.size()) {
                return false;
            }
            for (size_t j = 0; j < a[i].tool_calls.size(); ++j) {
                if (a[i].tool_calls[j].name != b[i].tool_calls[j].name ||
                    a[i].tool_calls[j].arguments != b[i].tool_calls[j].arguments) {
                    return false;
                }
            }
        }
        return true;
    };
    return endpoint == o.endpoint && model == o.model && prompt_is_text == o.prompt_is_text &&
           prompt_text == o.prompt_text && prompt_ids == o.prompt_ids && same_messages(messages, o.messages) &&
           tools == o.tools && add_generation_prompt == o.add_generation_prompt &&
           enable_thinking == o.enable_thinking && max_tokens == o.max_tokens && temperature == o.temperature &&
           top_p == o.top_p && top_k == o.top_k && seed == o.seed && stop == o.stop &&
           stop_token_ids == o.stop_token_ids && ignore_eos == o.ignore_eos &&
           skip_special_tokens == o.skip_special_tokens && stream == o.stream && include_usage == o.include_usage &&
           return_token_ids == o.return_token_ids;
}

std::variant<ApiRequest, ApiError> parseApiRequest(ApiEndpoint endpoint, std::string_view body) {
    const std::optional<Json> document = parseJson(body);
    if (!document) {
        return ApiError{
            400,
            fmt::format("malformed JSON: the body must be a JSON object nested at most {} levels", kMaxJsonDepth),
            {},
            {}};
    }
    ApiRequest r;
    r.endpoint = endpoint;
    RequestParser parser;
    std::vector<std::string_view> known(std::begin(kCommonFields), std::end(kCommonFields));
    if (endpoint == ApiEndpoint::kCompletions) {
        known.push_back("prompt");
    } else {
        for (std::string_view f :
             {"messages", "max_completion_tokens", "add_generation_prompt", "chat_template_kwargs", "tools"}) {
            known.push_back(f);
        }
    }
    if (!document->is_object()) {
        return ApiError{
            400, fmt::format("malformed JSON: the body must be a JSON object, got {}", shown(*document)), {}, {}};
    }
    for (const auto& [key, unused] : document->items()) {
        if (std::find(known.begin(), known.end(), key) == known.end()) {
            return ApiError{400, fmt::format("unknown field \"{}\"", key), key, {}};
        }
    }
    parser.common(*document, &r);
    if (endpoint == ApiEndpoint::kCompletions) {
        parser.prompt(*document, &r);
    } else {
        parser.chatFields(*document, &r);
    }
    if (parser.failed()) return parser.error();
    return r;
}

std::string apiRequestToJson(const ApiRequest& r) {
    Json j = Json::object();
    j["model"] = r.model;
    if (r.endpoint == ApiEndpoint::kCompletions) {
        j["prompt"] = r.prompt_is_text ? Json(r.prompt_text) : Json(r.prompt_ids);
    } else {
        Json messages = Json::array();
        for (const tokenizer::ChatMessage& m : r.messages) {
            Json message = {{"role", m.role}, {"content", m.content}};
            if (m.reasoning_content) message["reasoning_content"] = *m.reasoning_content;
            if (!m.tool_calls.empty()) {
                Json calls = Json::array();
                for (const tokenizer::ChatToolCall& call : m.tool_calls) {
                    calls.push_back({{"function", {{"name", call.name}, {"arguments", call.arguments}}}});
                }
                message["tool_calls"] = std::move(calls);
            }
            messages.push_back(std::move(message));
        }
        j["messages"] = std::move(messages);
        Json tools = Json::array();
        for (const std::string& tool : r.tools) tools.push_back(Json::parse(tool));
        j["tools"] = std::move(tools);
        j["add_generation_prompt"] = r.add_generation_prompt;
        j["chat_template_kwargs"] = {{"enable_thinking", r.enable_thinking}};
    }
    if (r.max_tokens) j["max_tokens"] = *r.max_tokens;
    if (r.temperature) j["temperature"] = *r.temperature;
    if (r.top_p) j["top_p"] = *r.top_p;
    if (r.top_k) j["top_k"] = *r.top_k;
    if (r.seed) j["seed"] = *r.seed;
    j["n"] = 1;
    j["stop"] = r.stop;
    j["stop_token_ids"] = r.stop_token_ids;
    j["ignore_eos"] = r.ignore_eos;
    j["skip_special_tokens"] = r.skip_special_tokens;
    j["return_token_ids"] = r.return_token_ids;
    j["stream"] = r.stream;
    if (r.stream) j["stream_options"] = {{"include_usage", r.include_usage}};
    return j.dump();
}

tokenizer::ChatRenderOptions chatRenderOptions(const ApiRequest& request) {
    tokenizer::ChatRenderOptions options;
    options.add_generation_prompt = request.add_generation_prompt;
    options.enable_thinking = request.enable_thinking;
    for (const std::string& tool : request.tools) {
        options.tools.push_back(tokenizer::pythonJsonDumps(Json::parse(tool)));
    }
    return options;
}

}  // namespace afd::serve
