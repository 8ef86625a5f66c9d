#include "tokenizer/chat_json.h"

#include <fmt/format.h>

#include "tokenizer/python_json.h"

namespace afd::tokenizer {
namespace {

using nlohmann::ordered_json;

core::Status typeError(const std::string& name, std::string_view rule, const ordered_json& value) {
    return core::invalidArgument("{} must be {}, got {}", name, rule, value.type_name());
}

core::Result<ChatToolCall> toolCallFromJson(const ordered_json& call, const std::string& name) {
    if (!call.is_object()) return typeError(name, "an object", call);
    // The template takes `function` when it is truthy (a non-empty object), else the call itself.
    const auto function = call.find("function");
    const bool nested = function != call.end() && function->is_object() && !function->empty();
    const ordered_json& f = nested ? *function : call;
    const std::string f_name = nested ? name + ".function" : name;
    ChatToolCall out;
    if (const auto n = f.find("name"); n != f.end()) {
        if (!n->is_string()) return typeError(f_name + ".name", "a string", *n);
        out.name = n->get<std::string>();
    }
    const auto arguments = f.find("arguments");
    if (arguments == f.end()) return core::invalidArgument("{}.arguments is missing", f_name);
    out.arguments = arguments->is_string() ? arguments->get<std::string>() : pythonJsonDumps(*arguments);
    return out;
}

core::Result<std::string> stringOrNull(const ordered_json& m, const char* key, const std::string& name) {
    const auto it = m.find(key);
    if (it == m.end() || it->is_null()) return std::string();
    if (!it->is_string()) return typeError(fmt::format("{}.{}", name, key), "a string or null", *it);
    return it->get<std::string>();
}

}  // namespace

core::Result<std::vector<ChatMessage>> chatMessagesFromJson(const ordered_json& messages) {
    if (!messages.is_array()) return typeError("messages", "a list", messages);
    std::vector<ChatMessage> out;
    out.reserve(messages.size());
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string name = fmt::format("messages[{}]", i);
        const ordered_json& m = messages[i];
        if (!m.is_object()) return typeError(name, "an object", m);
        ChatMessage message;
        const auto role = m.find("role");
        if (role == m.end()) return core::invalidArgument("{}.role is missing", name);
        if (!role->is_string()) return typeError(name + ".role", "a string", *role);
        message.role = role->get<std::string>();
        AFD_ASSIGN_OR_RETURN(message.content, stringOrNull(m, "content", name));
        if (const auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
            if (!r->is_string()) return typeError(name + ".reasoning_content", "a string or null", *r);
            message.reasoning_content = r->get<std::string>();
        }
        if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
            if (!calls->is_array()) return typeError(name + ".tool_calls", "a list", *calls);
            for (size_t j = 0; j < calls->size(); ++j) {
                AFD_ASSIGN_OR_RETURN(ChatToolCall call,
                                     toolCallFromJson((*calls)[j], fmt::format("{}.tool_calls[{}]", name, j)));
                message.tool_calls.push_back(std::move(call));
            }
        }
        out.push_back(std::move(message));
    }
    return out;
}

core::Result<std::vector<std::string>> chatToolsFromJson(const ordered_json& tools) {
    std::vector<std::string> out;
    if (tools.is_null()) return out;
    if (!tools.is_array()) return typeError("tools", "a list or null", tools);
    for (const ordered_json& tool : tools) out.push_back(pythonJsonDumps(tool));
    return out;
}

}  // namespace afd::tokenizer
