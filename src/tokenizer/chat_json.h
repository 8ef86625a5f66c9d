// Chat conversations from JSON (OpenAI's chat-completions shapes) for renderQwen3Chat (chat_template.h).
// NOTE: this header brings nlohmann/json; include it from .cpp files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace afd::tokenizer {

// `messages`: a list of {"role": string, "content": string or null, "reasoning_content": string or null,
// "tool_calls": [{"function": {"name", "arguments"}} or {"name", "arguments"}]}; other keys are ignored. A null
// content is "" (the template itself cannot add None to a string). A tool call's arguments are written as they are
// when a string, else as Python's json.dumps writes them; a call without arguments is an error (the template's
// tojson cannot write an undefined value). Errors (kInvalidArgument) name the field: "messages[2].tool_calls[0]".
core::Result<std::vector<ChatMessage>> chatMessagesFromJson(const nlohmann::ordered_json& messages);

// `tools`: a list of JSON values (OpenAI's {"type": "function", "function": {…}}), each as the template's tojson
// writes it. null is no tools.
core::Result<std::vector<std::string>> chatToolsFromJson(const nlohmann::ordered_json& tools);

}  // namespace afd::tokenizer
