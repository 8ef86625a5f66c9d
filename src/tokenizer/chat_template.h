// The Qwen3 chat template (the Jinja `chat_template` of Qwen3's tokenizer_config.json) rendered in C++: the same
// string transformers' apply_chat_template renders, for the conversations the template accepts.
//
// What the template does, and so what renderQwen3Chat does:
//   - tools: a system turn first that holds the first message's content when that message is a system message,
//     then "# Tools" with each tool's JSON (Python json.dumps form, in the order given) inside <tools></tools>;
//     without tools, a first system message is a system turn of its own;
//   - user turns, and system messages after the first, as <|im_start|>role\ncontent<|im_end|>\n;
//   - assistant turns: the reasoning is reasoning_content when given, else the text between <think> and </think>
//     in the content (which then keeps only what follows </think>). After the last user query (the last user
//     message that is not wholly a <tool_response>…</tool_response>), an assistant turn shows its reasoning as
//     <think>\n…\n</think>\n\n when it is the last message or has reasoning; earlier turns show the content only;
//     each tool call follows as <tool_call>\n{"name": …, "arguments": …}\n</tool_call>;
//   - consecutive tool messages: one user turn of <tool_response>\n…\n</tool_response> blocks;
//   - other roles: nothing;
//   - add_generation_prompt: <|im_start|>assistant\n, and <think>\n\n</think>\n\n after it when enable_thinking is
//     false.
// Thread-safe (no state).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace afd::tokenizer {

struct ChatToolCall {
    std::string name;
    // Written as it is: a JSON string's value (OpenAI's `arguments` is a string), or the JSON text of an object in
    // Python's json.dumps form (pythonJsonDumps, python_json.h) as the template's tojson writes it.
    std::string arguments;
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", "tool"; other roles are not rendered
    std::string content;
    std::optional<std::string> reasoning_content;  // assistant: the thinking, when given separately
    std::vector<ChatToolCall> tool_calls;          // assistant
};

struct ChatRenderOptions {
    // Each tool's JSON text in Python's json.dumps form (pythonJsonDumps), in order. Empty: no tools block.
    std::vector<std::string> tools;
    bool add_generation_prompt = false;
    bool enable_thinking = true;  // false: the empty think block after the generation prompt
};

// The prompt text. An error (kInvalidArgument) for an empty conversation, which the template cannot render.
core::Result<std::string> renderQwen3Chat(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options);

// Whether `chat_template` is, character for character, the Qwen3 template this renderer reproduces.
bool isQwen3ChatTemplate(std::string_view chat_template);

// The `chat_template` string of a tokenizer_config.json; errors name the file and the field.
core::Result<std::string> readChatTemplate(const std::string& tokenizer_config_path);

}  // namespace afd::tokenizer
