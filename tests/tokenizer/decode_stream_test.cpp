// Streaming decode: ids one at a time, never a broken character out, and the same text as decode() in the end.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

using DecodeStreamTest = testing::Qwen3TokenizerTest;

// Streams `ids`, checking each chunk; returns the chunks joined.
std::string streamed(const Tokenizer& tok, const std::vector<TokenId>& ids, DecodeOptions options = {}) {
    DecodeStream stream(tok, options);
    std::string all;
    for (const TokenId id : ids) {
        const std::string chunk = stream.step(id);
        EXPECT_TRUE(isValidUtf8(chunk)) << "a chunk ends inside a character";
        EXPECT_LE(stream.pendingBytes(), 3u);
        all += chunk;
    }
    const std::string rest = stream.flush();
    EXPECT_TRUE(isValidUtf8(rest));
    EXPECT_EQ(stream.pendingBytes(), 0u);
    return all + rest;
}

TEST_F(DecodeStreamTest, EmojiAndCjkSplitAcrossTokensComeOutWhole) {
    // These characters take several byte-level tokens each: the stream holds their first bytes back.
    const std::string text = "emoji 😀🎉🦜 👨‍👩‍👧 and 日本語の𠮷野家 ©®™ 🇯🇵";
    core::Result<std::vector<TokenId>> ids = tok().encode(text);
    ASSERT_TRUE(ids.isOk());
    DecodeStream stream(tok());
    std::string all;
    int held_back = 0;
    for (const TokenId id : *ids) {
        const std::string chunk = stream.step(id);
        ASSERT_TRUE(isValidUtf8(chunk));
        held_back += stream.pendingBytes() > 0 ? 1 : 0;
        all += chunk;
    }
    EXPECT_GT(held_back, 0) << "no character of the text was split across tokens: the test proves nothing";
    EXPECT_EQ(stream.pendingBytes(), 0u);
    EXPECT_EQ(all + stream.flush(), text);
}

TEST_F(DecodeStreamTest, JoinedChunksEqualDecodeForAnyIds) {
    std::mt19937 rng(5);
    // Ids of single bytes (the first 256 tokens and their neighbours) break characters the most.
    std::uniform_int_distribution<TokenId> byte_token(0, 300);
    std::uniform_int_distribution<TokenId> any_token(0, 151700);
    for (int round = 0; round < 2000; ++round) {
        std::vector<TokenId> ids;
        const int n = static_cast<int>(rng() % 12);
        for (int i = 0; i < n; ++i) ids.push_back(rng() % 4 == 0 ? any_token(rng) : byte_token(rng));
        for (const bool skip : {false, true}) {
            ASSERT_EQ(streamed(tok(), ids, {.skip_special_tokens = skip}),
                      tok().decode(ids, {.skip_special_tokens = skip}))
                << "round " << round;
        }
    }
}

TEST_F(DecodeStreamTest, AnUnfinishedCharacterIsReplacedAtFlush) {
    const std::optional<TokenId> lead = tok().tokenToId("\xC3\xA4");  // 'ä' in the alphabet: the byte E4
    ASSERT_TRUE(lead.has_value());
    DecodeStream stream(tok());
    EXPECT_EQ(stream.step(9707), "Hello");
    EXPECT_EQ(stream.step(*lead), "");
    EXPECT_EQ(stream.pendingBytes(), 1u);
    EXPECT_EQ(stream.flush(), std::string(kReplacementCharacter));
    EXPECT_EQ(stream.step(1879), " world");  // the stream goes on after a flush
}

TEST_F(DecodeStreamTest, SpecialTokensSkippedOrKept) {
    core::Result<std::vector<TokenId>> ids = tok().encode("<|im_start|>assistant\n你好<|im_end|>");
    ASSERT_TRUE(ids.isOk());
    EXPECT_EQ(streamed(tok(), *ids), "<|im_start|>assistant\n你好<|im_end|>");
    EXPECT_EQ(streamed(tok(), *ids, {.skip_special_tokens = true}), "assistant\n你好");
}

}  // namespace
}  // namespace afd::tokenizer
