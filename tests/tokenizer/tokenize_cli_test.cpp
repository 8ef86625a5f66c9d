// `afd tokenize` as a user runs it: strings in, HF's ids out; --decode back; bad input ends with one clear message.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/subprocess_util.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::tokenizer {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;
using afd::testing::TempDir;
using nlohmann::json;

std::string quoted(const std::string& s) {
    std::string out = "'";
    for (const char c : s) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out += c;
        }
    }
    return out + "'";
}

// Runs `afd tokenize ARGS < stdin_text`.
ProcessResult tokenize(const std::string& stdin_text, const std::string& tokenizer_path,
                       const std::string& extra_args = "") {
    TempDir dir;
    std::ofstream(dir.file("in.json")) << stdin_text;
    return runProcess({"/bin/sh", "-c",
                       "exec " + quoted(AFD_BINARY) + " tokenize --tokenizer " + quoted(tokenizer_path) + " " +
                           extra_args + " < " + quoted(dir.file("in.json"))});
}

using TokenizeCli = testing::Qwen3TokenizerTest;

TEST_F(TokenizeCli, EncodesGoldenStrings) {
    const json golden = json::parse(testing::readFile(std::string(AFD_TEST_DATA) + "/qwen3-tokenizer/golden.json"));
    json texts = json::array();
    json expected = json::array();
    json decoded = json::array();
    for (const json& g : golden) {
        texts.push_back(g["text"]);
        expected.push_back(g["ids"]);
        decoded.push_back(g["decoded"]);  // NFC of the text
    }
    const ProcessResult r = tokenize(texts.dump(), testing::qwen3TokenizerPath());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out), expected);

    const ProcessResult back = tokenize(expected.dump(), testing::qwen3TokenizerPath(), "--decode");
    ASSERT_EQ(back.exit_code, 0) << back.err;
    EXPECT_EQ(json::parse(back.out), decoded);
}

TEST_F(TokenizeCli, DecodeSkipsSpecialTokensOnRequest) {
    const ProcessResult r = tokenize("[[151644, 77091, 198, 9707, 151645]]", testing::qwen3TokenizerPath(),
                                     "--decode --skip-special-tokens");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out), json::array({"assistant\nHello"}));
}

TEST_F(TokenizeCli, BadInputIsOneClearError) {
    const std::string path = testing::qwen3TokenizerPath();
    const auto expect_error = [](const ProcessResult& r, int code, const std::string& needle) {
        EXPECT_EQ(r.exit_code, code) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    };
    expect_error(tokenize("[\"a\", ", path), 2, "stdin is not valid JSON");
    expect_error(tokenize("{\"text\": \"a\"}", path), 2, "stdin must be a JSON array of strings");
    expect_error(tokenize("[\"a\", 7]", path), 2, "stdin[1] must be a string");
    expect_error(tokenize("[[1, \"x\"]]", path, "--decode"), 2, "stdin[0] must be an array of token ids");
    expect_error(tokenize("[\"a\"]", "/nonexistent/tokenizer.json"), 2, "/nonexistent/tokenizer.json");
}

}  // namespace
}  // namespace afd::tokenizer
