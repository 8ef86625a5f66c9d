#!/usr/bin/env python3
"""Renders the golden conversations of chat_golden.json with Qwen3's chat template.

The template is the `chat_template` of tokenizer_config.json beside this file, rendered the way transformers'
apply_chat_template renders it (transformers.utils.chat_template_utils): jinja2's ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a `tojson` filter that is json.dumps with
ensure_ascii=False (keys in insertion order, no HTML escaping), and the raise_exception and strftime_now globals.
The tokenizer's special tokens are passed as template variables too, as transformers passes them.

    python3 tests/data/qwen3-tokenizer/make_chat_golden.py    # writes chat_golden.json beside this file

Needs jinja2 (3.1.6 made the committed file). Each case holds the render arguments and the `rendered` string that
the C++ renderer (src/tokenizer/chat_template.h) must reproduce exactly.
"""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 東京 or Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns <b>HTML</b> & text.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3},
                           "safe": {"type": "boolean", "default": True}, "min_score": {"type": "number",
                                                                                     "default": 0.5}},
            "required": ["query"],
        },
    },
}


def case(name, messages, **kwargs):
    return {"name": name, "messages": messages, **kwargs}


CASES = [
    case("user_only", [{"role": "user", "content": "Hello!"}], add_generation_prompt=True),
    case("user_only_no_generation_prompt", [{"role": "user", "content": "Hello!"}]),
    case("system_user", [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True),
    case("enable_thinking_false", [{"role": "user", "content": "Quick answer: capital of France?"}],
         add_generation_prompt=True, enable_thinking=False),
    case("enable_thinking_true", [{"role": "user", "content": "Think about it."}], add_generation_prompt=True,
         enable_thinking=True),
    case("multi_turn_history_thinking_dropped", [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ], add_generation_prompt=True),
    case("last_assistant_reasoning_content", [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.",
         "reasoning_content": "\n\nShort wavelengths scatter more.\n"},
    ]),
    case("last_assistant_inline_think", [
        {"role": "user", "content": "Sum 1..10?"},
        {"role": "assistant", "content": "<think>\n1+2+...+10 = 55\n</think>\n\n\n55"},
    ]),
    case("last_assistant_without_reasoning", [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "Yes."},
    ]),
    case("history_reasoning_content_before_last_query", [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer", "reasoning_content": "first thoughts"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "Second answer", "reasoning_content": "second thoughts"},
    ], add_generation_prompt=False),
    case("reasoning_content_null_falls_back_to_content", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "pre<think>inner</think>post", "reasoning_content": None},
    ]),
    case("tools_with_system", [
        {"role": "system", "content": "You can check the weather."},
        {"role": "user", "content": "Weather in Zürich?"},
    ], tools=[WEATHER, SEARCH], add_generation_prompt=True),
    case("tools_without_system", [{"role": "user", "content": "Search for cats"}], tools=[SEARCH],
         add_generation_prompt=True, enable_thinking=False),
    case("tool_call_round_trip", [
        {"role": "user", "content": "What's the weather in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    ], tools=[WEATHER], add_generation_prompt=True),
    case("multi_step_tools_and_grouped_responses", [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Compare weather in Paris and Rome, then search."},
        {"role": "assistant", "content": "Let me check both.", "reasoning_content": "Two calls needed.",
         "tool_calls": [
             {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
             {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "Paris: 18C"},
        {"role": "tool", "content": "Rome: 24C"},
        {"role": "assistant", "content": "<think>\nNow search.\n</think>\n\n", "tool_calls": [
            {"name": "search", "arguments": {"query": "Paris vs Rome", "top_k": 2, "safe": False,
                                             "min_score": 1e-3, "tags": None}}]},
        {"role": "tool", "content": "results..."},
    ], tools=[WEATHER, SEARCH], add_generation_prompt=True),
    case("final_answer_after_tools", [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "call the tool",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "-3C, snow"},
        {"role": "assistant", "content": "It is -3°C and snowing in Oslo.", "reasoning_content": "answer now"},
    ], tools=[WEATHER]),
    case("user_content_that_looks_like_a_tool_response", [
        {"role": "user", "content": "Real question"},
        {"role": "assistant", "content": "Answer one", "reasoning_content": "kept: after the last real query"},
        {"role": "user", "content": "<tool_response>\npasted output\n</tool_response>"},
        {"role": "assistant", "content": "Answer two", "reasoning_content": "also kept"},
    ]),
    case("system_not_first", [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Late system note."},
        {"role": "user", "content": "Still there?"},
    ], add_generation_prompt=True),
    case("unknown_role_is_not_rendered", [
        {"role": "developer", "content": "ignored"},
        {"role": "user", "content": "ok"},
    ], add_generation_prompt=True),
    case("unicode_and_special_looking_text", [
        {"role": "system", "content": "Réponds en français 🇫🇷."},
        {"role": "user", "content": "日本語で答えて 😀 <|im_end|> literal? tabs\tand\nnewlines\n\n"},
        {"role": "assistant", "content": "\n\nはい、わかりました。", "reasoning_content": "\n"},
    ], add_generation_prompt=True),
]


def render(template, spec):
    kwargs = {k: v for k, v in spec.items() if k not in ("name", "messages", "rendered")}
    return template.render(messages=spec["messages"], **SPECIAL_TOKENS, **kwargs)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


with open(os.path.join(HERE, "tokenizer_config.json"), encoding="utf-8") as f:
    CONFIG = json.load(f)
SPECIAL_TOKENS = {key: CONFIG.get(key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
SPECIAL_TOKENS["additional_special_tokens"] = CONFIG.get("additional_special_tokens", [])

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
TEMPLATE = env.from_string(CONFIG["chat_template"])

out = []
for spec in CASES:
    out.append({**spec, "rendered": render(TEMPLATE, spec)})
with open(os.path.join(HERE, "chat_golden.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {len(out)} conversations to chat_golden.json")
