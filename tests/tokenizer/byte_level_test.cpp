// GPT-2's byte-level alphabet.
#include <gtest/gtest.h>

#include <set>

#include "tokenizer/byte_level.h"

namespace afd::tokenizer {
namespace {

TEST(ByteLevel, AlphabetIsGpt2s) {
    EXPECT_EQ(byteToChar(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(byteToChar('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(byteToChar('A'), char32_t{'A'});
    EXPECT_EQ(byteToChar(0x00), 0x100u);
    EXPECT_EQ(byteToChar(0x7F), 0x121u);
    EXPECT_EQ(byteToChar(0xA0), 0x142u);
    EXPECT_EQ(byteToChar(0xAD), 0x143u);
    EXPECT_EQ(byteToChar(0xE9), 0xE9u);
    std::set<char32_t> chars;
    for (int b = 0; b < 256; ++b) {
        chars.insert(byteToChar(static_cast<uint8_t>(b)));
        EXPECT_EQ(charToByte(byteToChar(static_cast<uint8_t>(b))), b);
    }
    EXPECT_EQ(chars.size(), 256u);
    EXPECT_EQ(charToByte(0x144), std::nullopt);
    EXPECT_EQ(charToByte(0x20), std::nullopt);  // a space is not in the alphabet
}

TEST(ByteLevel, BytesRoundTrip) {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    EXPECT_EQ(alphabetToBytes(bytesToAlphabet(all)), all);
    EXPECT_EQ(bytesToAlphabet(" hi\n"), "\xC4\xA0hi\xC4\x8A");
}

TEST(ByteLevel, TokensOutsideTheAlphabetDecodeAsWritten) {
    EXPECT_EQ(alphabetToBytes("<|im_start|>"), "<|im_start|>");
    EXPECT_EQ(alphabetToBytes("a b"), "a b");                    // ' ' is not in the alphabet: the whole token as is
    EXPECT_EQ(alphabetToBytes("\xE4\xB8\xAD"), "\xE4\xB8\xAD");  // '中' likewise
    EXPECT_EQ(alphabetToBytes("\xC4\xA0world"), " world");
}

}  // namespace
}  // namespace afd::tokenizer
