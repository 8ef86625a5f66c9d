// The Qwen3 chat template in C++ against the Jinja template rendered as transformers renders it
// (tests/data/qwen3-tokenizer/chat_golden.json, from make_chat_golden.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/python_json.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::tokenizer {
namespace {

using nlohmann::ordered_json;

const std::string kData = std::string(AFD_TEST_DATA) + "/qwen3-tokenizer";

core::Result<std::string> renderCase(const ordered_json& c) {
    AFD_ASSIGN_OR_RETURN(const std::vector<ChatMessage> messages, chatMessagesFromJson(c["messages"]));
    ChatRenderOptions options;
    if (c.contains("tools")) {
        AFD_ASSIGN_OR_RETURN(options.tools, chatToolsFromJson(c["tools"]));
    }
    options.add_generation_prompt = c.value("add_generation_prompt", false);
    options.enable_thinking = c.value("enable_thinking", true);
    return renderQwen3Chat(messages, options);
}

TEST(ChatTemplate, GoldenConversationsRenderExactly) {
    const ordered_json golden = ordered_json::parse(testing::readFile(kData + "/chat_golden.json"));
    ASSERT_GE(golden.size(), 15u);
    for (const ordered_json& c : golden) {
        const core::Result<std::string> rendered = renderCase(c);
        ASSERT_TRUE(rendered.isOk()) << c["name"] << ": " << rendered.status().toString();
        EXPECT_EQ(*rendered, c["rendered"].get<std::string>()) << c["name"];
    }
}

TEST(ChatTemplate, TokenizerConfigHoldsTheQwen3Template) {
    const core::Result<std::string> chat_template = readChatTemplate(kData + "/tokenizer_config.json");
    ASSERT_TRUE(chat_template.isOk()) << chat_template.status().toString();
    EXPECT_TRUE(isQwen3ChatTemplate(*chat_template));
    EXPECT_FALSE(isQwen3ChatTemplate(*chat_template + " "));
    const core::Result<std::string> missing = readChatTemplate("/nonexistent/tokenizer_config.json");
    ASSERT_FALSE(missing.isOk());
    EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer_config.json"), std::string::npos);
}

TEST(ChatTemplate, EmptyConversationIsAnError) { EXPECT_FALSE(renderQwen3Chat({}, {}).isOk()); }

TEST(ChatTemplate, JsonErrorsNameTheField) {
    const auto error = [](const char* text) {
        const core::Result<std::vector<ChatMessage>> r = chatMessagesFromJson(ordered_json::parse(text));
        return r.isOk() ? std::string() : r.status().message();
    };
    EXPECT_EQ(error(R"([{"role": "user", "content": "x"}])"), "");
    EXPECT_NE(error(R"([{"content": "x"}])").find("messages[0].role is missing"), std::string::npos);
    EXPECT_NE(error(R"([{"role": "user", "content": 3}])").find("messages[0].content must be a string or null"),
              std::string::npos);
    EXPECT_NE(error(R"([{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]}])")
                  .find("messages[0].tool_calls[0].function.arguments is missing"),
              std::string::npos);
}

TEST(ChatTemplate, PythonJsonDumps) {
    EXPECT_EQ(pythonJsonDumps(ordered_json::parse(R"({"z": 1, "a": [true, null, "é\n\"\u0001"], "f": 2.0})")),
              "{\"z\": 1, \"a\": [true, null, \"é\\n\\\"\\u0001\"], \"f\": 2.0}");
    EXPECT_EQ(pythonFloatRepr(0.1), "0.1");
    EXPECT_EQ(pythonFloatRepr(1e-4), "0.0001");
    EXPECT_EQ(pythonFloatRepr(1e-5), "1e-05");
    EXPECT_EQ(pythonFloatRepr(1.5e-7), "1.5e-07");
    EXPECT_EQ(pythonFloatRepr(1e15), "1000000000000000.0");
    EXPECT_EQ(pythonFloatRepr(1e16), "1e+16");
    EXPECT_EQ(pythonFloatRepr(123456789012345680.0), "1.2345678901234568e+17");
    EXPECT_EQ(pythonFloatRepr(-0.0), "-0.0");
    EXPECT_EQ(pythonFloatRepr(21.5), "21.5");
    EXPECT_EQ(pythonFloatRepr(1e22), "1e+22");
}

using ChatTemplateIds = testing::Qwen3TokenizerTest;

TEST_F(ChatTemplateIds, RenderedPromptsSplitOutTheirSpecialTokens) {
    const ordered_json golden = ordered_json::parse(testing::readFile(kData + "/chat_golden.json"));
    for (const ordered_json& c : golden) {
        const core::Result<std::string> rendered = renderCase(c);
        ASSERT_TRUE(rendered.isOk());
        const core::Result<std::vector<TokenId>> ids = tok().encode(*rendered);
        ASSERT_TRUE(ids.isOk());
        // Every <|im_start|> of the text is one token, and decoding gives the text back.
        size_t starts = 0;
        for (size_t at = rendered->find("<|im_start|>"); at != std::string::npos;
             at = rendered->find("<|im_start|>", at + 1)) {
            ++starts;
        }
        EXPECT_EQ(static_cast<size_t>(std::count(ids->begin(), ids->end(), 151644)), starts) << c["name"];
        EXPECT_EQ(tok().decode(*ids), *rendered) << c["name"];
    }
}

}  // namespace
}  // namespace afd::tokenizer
