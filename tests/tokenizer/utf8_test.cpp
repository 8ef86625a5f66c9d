// UTF-8 helpers: the lossy repair must replace exactly what Python's bytes.decode("utf-8", "replace") and Rust's
// String::from_utf8_lossy replace (the expected counts below were printed by Python 3.11).
#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

int replacements(std::string_view bytes) {
    const std::string out = utf8Lossy(bytes);
    int n = 0;
    for (size_t at = out.find(kReplacementCharacter); at != std::string::npos;
         at = out.find(kReplacementCharacter, at + 1)) {
        ++n;
    }
    return n;
}

TEST(Utf8, LossyReplacesEachMaximalSubpart) {
    struct Case {
        std::string bytes;
        int replaced;
    };
    const std::vector<Case> cases = {
        {"\xFF", 1},
        {"\xE2\x82", 1},
        {"\xE2\x82\xAC", 0},
        {"\xED\xA0\x80", 3},      // a surrogate: ED takes only 80..9F next
        {"\xF0\x80\x80", 3},      // overlong: F0 takes only 90..BF next
        {"\xF0\x9F\x98", 1},      // a truncated emoji is one subpart
        {"\xF4\x90\x80\x80", 4},  // above U+10FFFF
        {"\xC0\xAF", 2},
        {"\xC2", 1},
        {"a\x80"
         "b",
         1},
        {"\xE0\x9F\x80", 3},
        {"\xE0\xA0\x80", 0},
        {"\xF8\x88\x80\x80\x80", 5},
        {"\xF1\x80\x80\xE1\x80\xC2", 3},
    };
    for (const Case& c : cases) {
        EXPECT_EQ(replacements(c.bytes), c.replaced) << "bytes of length " << c.bytes.size();
        EXPECT_EQ(isValidUtf8(c.bytes), c.replaced == 0);
        EXPECT_TRUE(isValidUtf8(utf8Lossy(c.bytes)));
    }
    EXPECT_EQ(utf8Lossy("a\x80"
                        "b"),
              "a\xEF\xBF\xBD"
              "b");
    EXPECT_EQ(firstInvalidUtf8("abc\xE2\x82\xAC\xFF"), 6u);
    EXPECT_EQ(firstInvalidUtf8(std::string(100, 'x') + "\xC2"), 100u);
}

TEST(Utf8, IncompleteTailIsWhatMoreBytesCouldComplete) {
    EXPECT_EQ(incompleteUtf8Tail(""), 0u);
    EXPECT_EQ(incompleteUtf8Tail("abc"), 0u);
    EXPECT_EQ(incompleteUtf8Tail("a\xE2"), 1u);
    EXPECT_EQ(incompleteUtf8Tail("a\xE2\x82"), 2u);
    EXPECT_EQ(incompleteUtf8Tail("a\xE2\x82\xAC"), 0u);
    EXPECT_EQ(incompleteUtf8Tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(incompleteUtf8Tail("\xF0\x80"), 0u);  // never valid: replaced at once
    EXPECT_EQ(incompleteUtf8Tail("\xED\xA0"), 0u);
    EXPECT_EQ(incompleteUtf8Tail("\x80\x80"), 0u);
    EXPECT_EQ(incompleteUtf8Tail("\xFF"), 0u);
}

TEST(Utf8, EncodeDecodeCodePoints) {
    for (const char32_t cp :
         {char32_t{0x41}, char32_t{0xE9}, char32_t{0x20AC}, char32_t{0x1F600}, char32_t{0x10FFFF}}) {
        std::string s;
        appendUtf8(cp, &s);
        const size_t length = utf8SequenceLength(s, 0);
        ASSERT_EQ(length, s.size());
        EXPECT_EQ(decodeUtf8(s, 0, length), cp);
    }
}

TEST(Utf8, WhiteSpaceIsUnicodeWhiteSpace) {
    int count = 0;
    for (char32_t c = 0; c < 0x110000; ++c) count += isUnicodeWhiteSpace(c) ? 1 : 0;
    EXPECT_EQ(count, 25);  // the White_Space property has 25 code points
    EXPECT_TRUE(isUnicodeWhiteSpace(0x85));
    EXPECT_FALSE(isUnicodeWhiteSpace(0x180E));
    EXPECT_FALSE(isUnicodeWhiteSpace(0x200B));
    EXPECT_FALSE(isUnicodeWhiteSpace(0x1C));
}

}  // namespace
}  // namespace afd::tokenizer
