// The Qwen3 tokenizer against HF tokenizers: golden.json (22 strings, HF tokenizers 0.23, add_special_tokens=False)
// and hf_golden.json (more strings and decodes, HF tokenizers 0.23.2: make_hf_golden.js), plus the properties that
// hold for any text (round trips, special tokens, invalid UTF-8).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

using nlohmann::json;
using testing::Qwen3TokenizerTest;
using testing::readFile;

const std::string kData = std::string(AFD_TEST_DATA) + "/qwen3-tokenizer";

std::vector<TokenId> ids(const json& list) { return list.get<std::vector<TokenId>>(); }

std::vector<TokenId> encodeOk(const Tokenizer& tok, std::string_view text, EncodeOptions options = {}) {
    core::Result<std::vector<TokenId>> r = tok.encode(text, options);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? *r : std::vector<TokenId>{};
}

using Qwen3Golden = Qwen3TokenizerTest;

TEST_F(Qwen3Golden, IdsAndDecodesEqualHfTokenizers) {
    const json golden = json::parse(readFile(kData + "/golden.json"));
    ASSERT_EQ(golden.size(), 22u);
    for (const json& g : golden) {
        const std::string text = g["text"];
        EXPECT_EQ(encodeOk(tok(), text), ids(g["ids"])) << "text: " << text;
        EXPECT_EQ(tok().decode(ids(g["ids"])), g["decoded"].get<std::string>()) << "text: " << text;
    }
}

TEST_F(Qwen3Golden, MoreStringsEqualHfTokenizers) {
    const json golden = json::parse(readFile(kData + "/hf_golden.json"));
    ASSERT_GE(golden["encode"].size(), 90u);
    size_t checked = 0;
    for (const json& g : golden["encode"]) {
        const std::string text = g["text"];
        EXPECT_EQ(encodeOk(tok(), text), ids(g["ids"])) << g["name"] << ": " << text;
        EXPECT_EQ(tok().decode(ids(g["ids"])), g["decoded"].get<std::string>()) << g["name"];
        EXPECT_EQ(tok().decode(ids(g["ids"]), {.skip_special_tokens = true}),
                  g["decoded_skip_special"].get<std::string>())
            << g["name"];
        ++checked;
    }
    EXPECT_EQ(checked, golden["encode"].size());
}

TEST_F(Qwen3Golden, DecodesOfArbitraryIdsEqualHfTokenizers) {
    const json golden = json::parse(readFile(kData + "/hf_golden.json"));
    ASSERT_GE(golden["decode"].size(), 10u);
    for (const json& g : golden["decode"]) {
        EXPECT_EQ(tok().decode(ids(g["ids"])), g["decoded"].get<std::string>()) << g["name"];
        EXPECT_EQ(tok().decode(ids(g["ids"]), {.skip_special_tokens = true}),
                  g["decoded_skip_special"].get<std::string>())
            << g["name"];
    }
}

TEST_F(Qwen3Golden, ChatRendersEncodeAsHfTokenizers) {
    const json golden = json::parse(readFile(kData + "/hf_golden.json"));
    const json chats = json::parse(readFile(kData + "/chat_golden.json"));
    ASSERT_EQ(golden["chat"].size(), chats.size());
    for (size_t i = 0; i < chats.size(); ++i) {
        EXPECT_EQ(golden["chat"][i]["name"], chats[i]["name"]);
        EXPECT_EQ(encodeOk(tok(), chats[i]["rendered"].get<std::string>()), ids(golden["chat"][i]["ids"]))
            << chats[i]["name"];
    }
}

using Qwen3Tokenizer = Qwen3TokenizerTest;

TEST_F(Qwen3Tokenizer, VocabularyShape) {
    EXPECT_EQ(tok().idLimit(), 151669);
    EXPECT_EQ(tok().addedTokens().size(), 26u);
    EXPECT_EQ(tok().tokenToId("<|im_start|>"), 151644);
    EXPECT_EQ(tok().tokenToId("Ġworld"), 1879);
    EXPECT_EQ(tok().idToToken(151667), "<think>");
    EXPECT_EQ(tok().idToToken(1879), "Ġworld");
    EXPECT_EQ(tok().idToToken(151669), std::nullopt);
    EXPECT_EQ(tok().tokenBytes(1879), " world");
}

TEST_F(Qwen3Tokenizer, SpecialAndAddedTokensAreSplitOutFirst) {
    // <|im_start|> and <|im_end|> are special; <think> and </think> are added but not special.
    const std::vector<TokenId> got = encodeOk(tok(), "a<|im_start|>b<think>c</think><|im_end|><|endoftext|>");
    ASSERT_GE(got.size(), 7u);
    EXPECT_EQ(std::count(got.begin(), got.end(), 151644), 1);
    EXPECT_EQ(std::count(got.begin(), got.end(), 151667), 1);
    EXPECT_EQ(std::count(got.begin(), got.end(), 151668), 1);
    EXPECT_EQ(got[got.size() - 2], 151645);
    EXPECT_EQ(got.back(), 151643);
    EXPECT_EQ(encodeOk(tok(), "<|im_start|><|im_start|>"), (std::vector<TokenId>{151644, 151644}));
    // Not quite a token: ordinary text.
    const std::vector<TokenId> partial = encodeOk(tok(), "<|im_start");
    EXPECT_EQ(std::count(partial.begin(), partial.end(), 151644), 0);
    EXPECT_EQ(tok().decode(partial), "<|im_start");
}

TEST_F(Qwen3Tokenizer, SplitSpecialTokensEncodesTheirTextAsText) {
    const std::string text = "<|im_start|>user\n<think>";
    const std::vector<TokenId> as_text = encodeOk(tok(), text, {.split_special_tokens = true});
    EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 151644), 0);
    // <think> is not special: still one token.
    EXPECT_EQ(as_text.back(), 151667);
    EXPECT_EQ(tok().decode(as_text), text);
}

TEST_F(Qwen3Tokenizer, DecodeWithAndWithoutSpecialTokens) {
    const std::vector<TokenId> chat = encodeOk(tok(), "<|im_start|>assistant\n<think>\nhm\n</think>\n\nok<|im_end|>");
    EXPECT_EQ(tok().decode(chat), "<|im_start|>assistant\n<think>\nhm\n</think>\n\nok<|im_end|>");
    EXPECT_EQ(tok().decode(chat, {.skip_special_tokens = true}), "assistant\n<think>\nhm\n</think>\n\nok");
    EXPECT_TRUE(tok().isSpecial(151645));
    EXPECT_FALSE(tok().isSpecial(151667));
    EXPECT_FALSE(tok().isSpecial(9707));
}

TEST_F(Qwen3Tokenizer, IdsThatAreNotTokensDecodeToNothing) {
    const std::vector<TokenId> with_unknown = {9707, 151669, 151935, -1, 1 << 30, 1879};
    EXPECT_EQ(tok().decode(with_unknown), "Hello world");
    EXPECT_EQ(tok().tokenBytes(151700), "");
}

TEST_F(Qwen3Tokenizer, NfcBeforeEncoding) {
    // "é" as e + U+0301 and as U+00E9 encode alike; U+212B ANGSTROM SIGN becomes U+00C5.
    EXPECT_EQ(encodeOk(tok(), "caf\x65\xCC\x81"), encodeOk(tok(), "caf\xC3\xA9"));
    EXPECT_EQ(encodeOk(tok(), "\xE2\x84\xAB"), encodeOk(tok(), "\xC3\x85"));
    EXPECT_EQ(tok().decode(encodeOk(tok(), "caf\x65\xCC\x81")), "caf\xC3\xA9");
    // Hangul jamo compose: U+1100 U+1161 U+11A8 is U+AC01.
    EXPECT_EQ(tok().decode(encodeOk(tok(), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8")), "\xEA\xB0\x81");
}

TEST_F(Qwen3Tokenizer, InvalidUtf8IsRejectedOrReplaced) {
    const std::string bad = "ok \xFF bad \xE2\x82 end \xED\xA0\x80";
    const core::Result<std::vector<TokenId>> rejected = tok().encode(bad);
    ASSERT_FALSE(rejected.isOk());
    EXPECT_EQ(rejected.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(rejected.status().message().find("byte 3"), std::string::npos) << rejected.status().message();
    // Replaced as Python's decode("utf-8", "replace"): FF -> 1, E2 82 -> 1, ED A0 80 -> 3 (ED A0 is never valid).
    const std::vector<TokenId> replaced = encodeOk(tok(), bad, {.invalid_utf8 = InvalidUtf8::kReplace});
    const std::string fffd(kReplacementCharacter);
    EXPECT_EQ(tok().decode(replaced), "ok " + fffd + " bad " + fffd + " end " + fffd + fffd + fffd);
    EXPECT_EQ(replaced, encodeOk(tok(), utf8Lossy(bad)));
}

TEST_F(Qwen3Tokenizer, RoundTripsRandomText) {
    // Text from pieces that NFC leaves alone, so decode(encode(x)) must be x itself.
    const std::vector<std::string> pieces = {"a",          "Z",          " ",          "  ",
                                             "\n",         "\r\n",       "\t",         "'s",
                                             "'LL",        "7",          "42",         ".",
                                             "...",        "é",          "日本",       "語",
                                             "😀",          "👍🏽",   "🇯🇵",         "\xE2\x80\x8D",
                                             "<|im_end|>", "<think>",    "<|im_start", "Ω",
                                             "ß",          "ا",          "\xC2\xA0",   "\xE3\x80\x80",
                                             "#",          "{\"k\": 1}", "\\",         "\x01",
                                             "\x7F",       "ſ",          "İ",          "\xF4\x8F\xBF\xBF"};
    std::mt19937 rng(30);
    for (int round = 0; round < 300; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
        const std::vector<TokenId> got = encodeOk(tok(), text);
        ASSERT_EQ(tok().decode(got), text) << "round " << round;
    }
}

TEST_F(Qwen3Tokenizer, LongInputsStayLinear) {
    // One word of 1 MB, a whitespace run of 1 MB, 100k emoji: no error, and decode gives them back.
    // (Time is not asserted; a quadratic merge loop would take minutes here.)
    for (const std::string& text :
         {std::string(1 << 20, 'a'), std::string(1 << 20, ' '), std::string(1 << 20, '\n'), [] {
              std::string s;
              for (int i = 0; i < 100000; ++i) s += "😀";
              return s;
          }()}) {
        const std::vector<TokenId> got = encodeOk(tok(), text);
        EXPECT_FALSE(got.empty());
        EXPECT_EQ(tok().decode(got), text);
    }
}

TEST_F(Qwen3Tokenizer, InterpreterGivesTheJitsIds) {
    const core::Result<Tokenizer> no_jit = Tokenizer::fromFile(testing::qwen3TokenizerPath(), {.use_jit = false});
    ASSERT_TRUE(no_jit.isOk()) << no_jit.status().toString();
    EXPECT_FALSE(no_jit->usesJit());
    const json golden = json::parse(readFile(kData + "/hf_golden.json"));
    for (const json& g : golden["encode"]) {
        const std::string text = g["text"];
        EXPECT_EQ(encodeOk(*no_jit, text), ids(g["ids"])) << g["name"];
    }
}

TEST_F(Qwen3Tokenizer, EncodesFromManyThreadsAtOnce) {
    const json golden = json::parse(readFile(kData + "/hf_golden.json"));
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int round = 0; round < 3; ++round) {
                for (const json& g : golden["encode"]) {
                    core::Result<std::vector<TokenId>> r = tok().encode(g["text"].get<std::string>());
                    if (!r.isOk() || *r != ids(g["ids"])) ++mismatches;
                }
            }
        });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace afd::tokenizer
