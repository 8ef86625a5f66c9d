// The pre-tokenizer's regex engine: Oniguruma's meaning of \s and \w on PCRE2, match iteration as Oniguruma's
// find_iter does it, and the interpreter agreeing with the JIT.
#include <gtest/gtest.h>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

std::vector<std::pair<size_t, size_t>> matches(const Regex& re, std::string_view text) {
    std::vector<std::pair<size_t, size_t>> out;
    EXPECT_TRUE(re.forEachMatch(text, [&](size_t b, size_t e) { out.emplace_back(b, e); }).isOk());
    return out;
}

bool matchesWhole(const Regex& re, const std::string& text) {
    size_t b = 0;
    size_t e = 0;
    const core::Result<bool> found = re.find(text, 0, &b, &e);
    return found.isOk() && *found && b == 0 && e == text.size();
}

TEST(Regex, TranslationSpellsOutSpaceAndWordClasses) {
    EXPECT_EQ(translateOnigurumaClasses(R"(a\\s)"), R"(a\\s)");  // an escaped backslash, then 's'
    EXPECT_NE(translateOnigurumaClasses(R"(\s)").find("\\x{85}"), std::string::npos);
    EXPECT_EQ(translateOnigurumaClasses(R"([\p{L}\]\s])").substr(0, 8), R"([\p{L}\])");
    EXPECT_EQ(translateOnigurumaClasses(R"([]\s])").substr(0, 3), "[]\\");  // ']' first in a class is literal
    EXPECT_EQ(translateOnigurumaClasses(R"([[:alpha:]\s])").substr(0, 10), "[[:alpha:]");
    EXPECT_EQ(translateOnigurumaClasses(R"([^\S])"), R"([^\S])");  // \S inside a class is PCRE2's
}

TEST(Regex, SpaceClassIsUnicodeWhiteSpace) {
    const core::Result<Regex> space = Regex::compile(R"(\s)");
    const core::Result<Regex> not_space = Regex::compile(R"(\S)");
    const core::Result<Regex> in_class = Regex::compile(R"([^\s\p{L}\p{N}])");
    ASSERT_TRUE(space.isOk() && not_space.isOk() && in_class.isOk());
    for (char32_t c = 1; c < 0x3100; ++c) {
        std::string s;
        appendUtf8(c, &s);
        EXPECT_EQ(matchesWhole(*space, s), isUnicodeWhiteSpace(c)) << std::hex << "U+" << uint32_t(c);
        EXPECT_EQ(matchesWhole(*not_space, s), !isUnicodeWhiteSpace(c)) << std::hex << "U+" << uint32_t(c);
        if (isUnicodeWhiteSpace(c)) {
            EXPECT_FALSE(matchesWhole(*in_class, s)) << std::hex << "U+" << uint32_t(c);
        }
    }
}

TEST(Regex, WordClassHasMarksAndConnectors) {
    const core::Result<Regex> word = Regex::compile(R"(\w+)");
    ASSERT_TRUE(word.isOk());
    EXPECT_TRUE(matchesWhole(*word, "e\xCC\x81"));  // e + COMBINING ACUTE (a mark)
    EXPECT_TRUE(matchesWhole(*word,
                             "a\xE2\x80\xBF"
                             "b"));                   // U+203F UNDERTIE (connector punctuation)
    EXPECT_TRUE(matchesWhole(*word, "x_1\xD9\xA3"));  // Arabic-Indic digit
    EXPECT_FALSE(matchesWhole(*word, "a-b"));
}

TEST(Regex, CaseInsensitiveContractions) {
    const core::Result<Regex> re = Regex::compile(R"((?i:'s|'t|'re|'ve|'m|'ll|'d))");
    ASSERT_TRUE(re.isOk());
    for (const char* s : {"'s", "'S", "'RE", "'Re", "'LL", "'lL", "'D"}) EXPECT_TRUE(matchesWhole(*re, s)) << s;
    EXPECT_FALSE(matchesWhole(*re, "'x"));
}

TEST(Regex, EmptyMatchesAreIteratedAsOnigurumaDoes) {
    const core::Result<Regex> re = Regex::compile("a*");
    ASSERT_TRUE(re.isOk());
    // An empty match right where the previous match ended is skipped by one character.
    EXPECT_EQ(matches(*re, "baaac"), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 4}, {5, 5}}));
    EXPECT_EQ(matches(*re, ""), (std::vector<std::pair<size_t, size_t>>{{0, 0}}));
    const core::Result<Regex> utf8 = Regex::compile("x*");
    ASSERT_TRUE(utf8.isOk());
    // The skip moves by a whole character, never into one.
    EXPECT_EQ(matches(*utf8, "\xC3\xA9x"), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {2, 3}}));
}

TEST(Regex, InterpreterAndJitAgree) {
    const std::string pattern =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const core::Result<Regex> jit = Regex::compile(pattern, true);
    const core::Result<Regex> interpreter = Regex::compile(pattern, false);
    ASSERT_TRUE(jit.isOk() && interpreter.isOk());
    EXPECT_FALSE(interpreter->usesJit());
    const std::string text = "Hello, world! It's 2024.\n\n  \t 日本語 😀 don'T\r\n   x   ";
    EXPECT_EQ(matches(*jit, text), matches(*interpreter, text));
    // Long inputs: a whitespace run and a word of 1 MB each.
    for (const std::string& big :
         {std::string(1 << 20, ' '), std::string(1 << 20, 'a') + "  " + std::string(1000, '\n')}) {
        EXPECT_EQ(matches(*jit, big), matches(*interpreter, big));
    }
}

TEST(Regex, BadPatternIsAnError) {
    const core::Result<Regex> re = Regex::compile("(unclosed");
    ASSERT_FALSE(re.isOk());
    EXPECT_NE(re.status().message().find("does not compile"), std::string::npos) << re.status().message();
}

}  // namespace
}  // namespace afd::tokenizer
