#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"

namespace afd::tokenizer {
namespace {

// FNV-1a (64-bit) of Qwen3's chat_template string and its length: enough to tell it from the other Qwen templates.
constexpr uint64_t kQwen3TemplateHash = 0x2bfdb7aa9754484eULL;
constexpr size_t kQwen3TemplateBytes = 4116;
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

constexpr std::string_view kToolsHeader =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsFooter =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// Python's str.lstrip / rstrip / strip with the characters "\n".
std::string_view lstripNewlines(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
std::string_view rstripNewlines(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}
std::string_view stripNewlines(std::string_view s) { return lstripNewlines(rstripNewlines(s)); }

// Python's s.split(sep)[-1] and s.split(sep)[0].
std::string_view afterLast(std::string_view s, std::string_view sep) {
    const size_t at = s.rfind(sep);
    return at == std::string_view::npos ? s : s.substr(at + sep.size());
}
std::string_view beforeFirst(std::string_view s, std::string_view sep) {
    const size_t at = s.find(sep);
    return at == std::string_view::npos ? s : s.substr(0, at);
}

bool isToolResponse(std::string_view content) {
    return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

void renderAssistant(const ChatMessage& m, bool after_last_query, bool is_last, std::string* out) {
    std::string_view content = m.content;
    std::string_view reasoning;
    if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
    } else if (m.content.find("</think>") != std::string::npos) {
        content = lstripNewlines(afterLast(m.content, "</think>"));
        reasoning = lstripNewlines(afterLast(rstripNewlines(beforeFirst(m.content, "</think>")), "<think>"));
    }
    *out += "<|im_start|>";
    *out += m.role;
    *out += '\n';
    if (after_last_query && (is_last || !reasoning.empty())) {
        *out += "<think>\n";
        *out += stripNewlines(reasoning);
        *out += "\n</think>\n\n";
        *out += lstripNewlines(content);
    } else {
        *out += content;
    }
    for (size_t j = 0; j < m.tool_calls.size(); ++j) {
        if (j > 0 || !content.empty()) *out += '\n';
        *out += "<tool_call>\n{\"name\": \"";
        *out += m.tool_calls[j].name;
        *out += "\", \"arguments\": ";
        *out += m.tool_calls[j].arguments;
        *out += "}\n</tool_call>";
    }
    *out += "<|im_end|>\n";
}

}  // namespace

core::Result<std::string> renderQwen3Chat(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
    if (messages.empty()) return core::invalidArgument("a chat needs at least one message");
    std::string out;
    const bool system_first = messages[0].role == "system";
    if (!options.tools.empty()) {
        out += "<|im_start|>system\n";
        if (system_first) {
            out += messages[0].content;
            out += "\n\n";
        }
        out += kToolsHeader;
        for (const std::string& tool : options.tools) {
            out += '\n';
            out += tool;
        }
        out += kToolsFooter;
    } else if (system_first) {
        out += "<|im_start|>system\n";
        out += messages[0].content;
        out += "<|im_end|>\n";
    }

    // The last user query: the last user message that is not wholly a tool response (the last message if none).
    size_t last_query = messages.size() - 1;
    for (size_t k = messages.size(); k-- > 0;) {
        if (messages[k].role == "user" && !isToolResponse(messages[k].content)) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        const bool is_last = i + 1 == messages.size();
        if (m.role == "user" || (m.role == "system" && i > 0)) {
            out += "<|im_start|>";
            out += m.role;
            out += '\n';
            out += m.content;
            out += "<|im_end|>\n";
        } else if (m.role == "assistant") {
            renderAssistant(m, i > last_query, is_last, &out);
        } else if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n";
            out += m.content;
            out += "\n</tool_response>";
            if (is_last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        }
    }
    if (options.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
}

bool isQwen3ChatTemplate(std::string_view chat_template) {
    if (chat_template.size() != kQwen3TemplateBytes) return false;
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (const char c : chat_template) {
        hash ^= static_cast<uint8_t>(c);
        hash *= 0x100000001b3ULL;
    }
    return hash == kQwen3TemplateHash;
}

core::Result<std::string> readChatTemplate(const std::string& path) {
    AFD_ASSIGN_OR_RETURN(const std::shared_ptr<core::MappedFile> file, core::MappedFile::open(path));
    if (file->size() > kMaxConfigBytes) {
        return core::invalidArgument("{}: {} bytes is more than a tokenizer_config.json may hold ({} bytes)", path,
                                     file->size(), kMaxConfigBytes);
    }
    nlohmann::json config;
    try {
        config = nlohmann::json::parse(file->data(), file->data() + file->size());
    } catch (const nlohmann::json::exception& e) {
        return core::corrupt("{}: not valid JSON: {}", path, e.what());
    }
    if (!config.is_object()) return core::corrupt("{}: the top level must be a JSON object", path);
    const auto it = config.find("chat_template");
    if (it == config.end()) return core::notFound("{}: chat_template is missing", path);
    if (it->is_string()) return it->get<std::string>();
    // Newer files list named templates: [{"name": "default", "template": "…"}, …].
    if (it->is_array()) {
        for (const auto& entry : *it) {
            if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
                entry["template"].is_string()) {
                return entry["template"].get<std::string>();
            }
        }
    }
    return core::invalidArgument("{}: chat_template must be a string (or a list holding a \"default\" template)", path);
}

}  // namespace afd::tokenizer
