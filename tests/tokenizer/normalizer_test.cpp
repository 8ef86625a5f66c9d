// Unicode normalization through utf8proc, and the NFC fast path's rule checked against utf8proc itself.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

std::string nfc(std::string_view s) {
    core::Result<std::string> r = normalizeUnicode(s, UnicodeForm::kNfc);
    EXPECT_TRUE(r.isOk());
    return r.isOk() ? *r : std::string();
}

TEST(Normalizer, Forms) {
    EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
    EXPECT_EQ(nfc("\xE2\x84\xAA"), "K");  // KELVIN SIGN
    EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
    EXPECT_EQ(nfc("\xEF\xAC\x81"), "\xEF\xAC\x81");  // the ﬁ ligature: compatibility only, NFC keeps it
    EXPECT_EQ(normalizeUnicode("\xEF\xAC\x81", UnicodeForm::kNfkc).value(), "fi");
    EXPECT_EQ(normalizeUnicode("\xC3\xA9", UnicodeForm::kNfd).value(), "e\xCC\x81");
    EXPECT_EQ(normalizeUnicode("\xE2\x91\xA0", UnicodeForm::kNfkd).value(), "1");
}

TEST(Normalizer, ReportsWhetherTheTextChanged) {
    const Normalizer n({UnicodeForm::kNfc});
    std::string out = "untouched";
    EXPECT_FALSE(n.normalize("plain ascii", &out).value());
    EXPECT_EQ(out, "untouched");
    EXPECT_FALSE(n.normalize("\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80", &out).value());
    EXPECT_TRUE(n.normalize("cafe\xCC\x81", &out).value());
    EXPECT_EQ(out, "caf\xC3\xA9");
    const Normalizer sequence({UnicodeForm::kNfd, UnicodeForm::kNfc});
    EXPECT_FALSE(sequence.normalize("caf\xC3\xA9", &out).value());  // NFD then NFC: back where it started
}

TEST(Normalizer, NfcInertCodePointsAreLeftAloneByUtf8proc) {
    // Every code point the fast path skips is its own NFC, and so is any string of them.
    std::vector<char32_t> inert;
    for (char32_t c = 0; c < 0x110000; ++c) {
        if (c >= 0xD800 && c < 0xE000) continue;
        if (!isNfcInert(c)) continue;
        std::string s;
        appendUtf8(c, &s);
        ASSERT_EQ(nfc(s), s) << std::hex << "U+" << uint32_t(c);
        if (c % 17 == 0) inert.push_back(c);
    }
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
        std::string s;
        for (int i = 0; i < 8; ++i) appendUtf8(inert[rng() % inert.size()], &s);
        ASSERT_EQ(nfc(s), s);
    }
    EXPECT_FALSE(isNfcInert(0x301));   // a combining mark
    EXPECT_FALSE(isNfcInert(0x1161));  // a Hangul vowel jamo
    EXPECT_FALSE(isNfcInert(0x212B));  // ANGSTROM SIGN: a singleton
    EXPECT_TRUE(isNfcInert(0xE9));     // é decomposes, but NFC composes it back and nothing composes onto it
}

TEST(Normalizer, RunByRunNfcEqualsWholeTextNfc) {
    // Strings dense in what NFC changes: combining marks in any order, Hangul jamo, singletons, decomposable
    // letters, kana with and without voicing marks, between inert text.
    const std::vector<char32_t> pool = {
        'a',    'e',    'A',    ' ',    0xE9,   0xC5,   0x301,   0x300,  0x316,  0x327,  0x308,  0x344,  0x1100, 0x1161,
        0x11A8, 0xAC00, 0xAC01, 0x212B, 0x212A, 0x2126, 0x3066,  0x3067, 0x3099, 0x309A, 0x304B, 0x0915, 0x093C, 0x0958,
        0x0F73, 0x0F71, 0x0F72, 0x1E0B, 0x0323, 0x6F22, 0x1F600, 0x05D0, 0x05B7, 0xFB2E, 0x0627, 0x0653, 0x0622};
    const Normalizer n({UnicodeForm::kNfc});
    std::mt19937 rng(11);
    for (int round = 0; round < 20000; ++round) {
        std::string s;
        const int length = static_cast<int>(rng() % 12);
        for (int i = 0; i < length; ++i) appendUtf8(pool[rng() % pool.size()], &s);
        std::string out;
        const bool changed = n.normalize(s, &out).value();
        const std::string expected = nfc(s);
        ASSERT_EQ(changed ? out : s, expected) << "round " << round;
        ASSERT_EQ(changed, expected != s);
    }
}

TEST(Normalizer, NothingBelowU0300ComposesWithAnotherSuch) {
    // The fast path takes every code point below U+0300 as inert: no pair of them may compose.
    for (char32_t a = 0x20; a < 0x300; ++a) {
        std::string pair;
        appendUtf8(a, &pair);
        const size_t first = pair.size();
        for (char32_t b = 0x20; b < 0x300; ++b) {
            pair.resize(first);
            appendUtf8(b, &pair);
            ASSERT_EQ(nfc(pair), pair) << std::hex << "U+" << uint32_t(a) << " U+" << uint32_t(b);
        }
    }
}

}  // namespace
}  // namespace afd::tokenizer
