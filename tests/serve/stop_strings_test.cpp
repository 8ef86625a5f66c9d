// StopStringMatcher on text split anywhere, and OutputAssembler on the Qwen3 tokenizer's ids: stop strings across
// token boundaries, held-back prefixes, the token ids kept after a match.
#include "serve/stop_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "serve/output_assembler.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::serve {
namespace {

// Feeds `pieces` and returns everything shown (finish() included when no stop matched).
std::string run(StopStringMatcher& m, const std::vector<std::string>& pieces) {
    std::string out;
    for (const std::string& p : pieces) out += m.push(p);
    return out + m.finish();
}

TEST(StopStringMatcherTest, NoStopsPassesEverything) {
    StopStringMatcher m({});
    EXPECT_EQ(m.push("abc"), "abc");
    EXPECT_EQ(m.heldBytes(), 0u);
    EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, HoldsBackAPrefixUntilDecided) {
    StopStringMatcher m({"STOP"});
    EXPECT_EQ(m.push("ab S"), "ab ");
    EXPECT_EQ(m.heldBytes(), 1u);
    EXPECT_EQ(m.push("T"), "");
    EXPECT_EQ(m.push("x"), "STx");  // not a stop after all: released
    EXPECT_EQ(m.push("ST"), "");
    EXPECT_EQ(m.push("OP and more"), "");
    EXPECT_TRUE(m.matched());
    EXPECT_EQ(m.push("later"), "");
    EXPECT_EQ(m.finish(), "");
}

TEST(StopStringMatcherTest, ReleasesTheHeldTailAtTheEnd) {
    StopStringMatcher m({"STOP"});
    EXPECT_EQ(m.push("abST"), "ab");
    EXPECT_EQ(m.finish(), "ST");
    EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, EarliestOccurrenceWins) {
    StopStringMatcher m({"world", "lo w"});
    EXPECT_EQ(run(m, {"hel", "lo wor", "ld"}), "hel");
    // Among the stop strings complete in the text so far: "abcd" starts first once "cd" comes at once, but "bc"
    // completes first when "c" comes alone.
    StopStringMatcher together({"bc", "abcd"});
    EXPECT_EQ(run(together, {"xab", "cd"}), "x");
    StopStringMatcher apart({"bc", "abcd"});
    EXPECT_EQ(run(apart, {"xab", "c", "d"}), "xa");
    StopStringMatcher overlapping({"aab"});
    EXPECT_EQ(run(overlapping, {"a", "a", "a", "b"}), "a");
}

TEST(StopStringMatcherTest, MultiByteCharactersStayWhole) {
    StopStringMatcher m({"\xE4\xB8\x96\xE7\x95\x8C"});                                      // "世界"
    EXPECT_EQ(m.push("\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96"), "\xE4\xBD\xA0\xE5\xA5\xBD");  // "你好" shown, "世" held
    EXPECT_EQ(m.push("\xE7\x95\x8C!"), "");
    EXPECT_TRUE(m.matched());
}

// Any split of a text gives what one push of it gives (no stop string here holds another one).
TEST(StopStringMatcherTest, SplitsDoNotChangeTheResult) {
    std::mt19937 rng(3);
    const std::vector<std::string> stops = {"ab", "bba", "aaaa"};
    for (int trial = 0; trial < 500; ++trial) {
        std::string text;
        const int n = static_cast<int>(rng() % 20);
        for (int i = 0; i < n; ++i) text += "abc"[rng() % 3];
        StopStringMatcher whole(stops);
        const std::string expected = run(whole, {text});
        std::vector<std::string> pieces;
        for (size_t i = 0; i < text.size();) {
            const size_t len = 1 + rng() % 4;
            pieces.push_back(text.substr(i, len));
            i += len;
        }
        StopStringMatcher split(stops);
        EXPECT_EQ(run(split, pieces), expected) << text;
        EXPECT_EQ(split.matched(), whole.matched()) << text;
        // The shown text is the text before the first stop string.
        size_t first = std::string::npos;
        for (const std::string& s : stops) first = std::min(first, text.find(s));
        EXPECT_EQ(expected, text.substr(0, first)) << text;
    }
}

class OutputAssemblerTest : public tokenizer::testing::Qwen3TokenizerTest {};

TEST_F(OutputAssemblerTest, TextAcrossTokensAndTheIdsKept) {
    const std::string text = "The quick brown fox jumps over the lazy dog. Then it sleeps.";
    auto ids = tok().encode(text);
    ASSERT_TRUE(ids.isOk());
    // No stop: every id, the whole text, whatever the outputs' sizes.
    {
        OutputAssembler a(&tok(), true, {});
        std::string shown;
        for (size_t i = 0; i < ids->size(); i += 3) {
            const size_t n = std::min<size_t>(3, ids->size() - i);
            shown += a.add(std::span<const int32_t>(ids->data() + i, n)).text;
        }
        shown += a.finish();
        EXPECT_EQ(shown, text);
        EXPECT_EQ(a.tokenIds(), *ids);
    }
    // A stop string spanning token boundaries ("over the la"): text before it, ids through the one that completed it.
    OutputAssembler a(&tok(), true, {"over the la"});
    std::string shown;
    size_t taken = 0;
    for (int32_t id : *ids) {
        OutputAssembler::Piece piece = a.add(std::span<const int32_t>(&id, 1));
        shown += piece.text;
        taken += piece.token_ids.size();
        if (a.stopped()) break;
    }
    shown += a.finish();
    EXPECT_TRUE(a.stopped());
    EXPECT_EQ(shown, "The quick brown fox jumps ");
    EXPECT_EQ(taken, a.tokenIds().size());
    // The ids kept decode to text that holds the stop string, and one id fewer would not.
    const std::string kept = tok().decode(a.tokenIds());
    EXPECT_NE(kept.find("over the la"), std::string::npos) << kept;
    const std::vector<int32_t> shorter(a.tokenIds().begin(), a.tokenIds().end() - 1);
    EXPECT_EQ(tok().decode(shorter).find("over the la"), std::string::npos);
    // Later outputs add nothing.
    EXPECT_TRUE(a.add(*ids).token_ids.empty());
}

TEST_F(OutputAssemblerTest, AStopInsideOneOutputDropsTheRest) {
    auto ids = tok().encode("alpha beta gamma delta");
    ASSERT_TRUE(ids.isOk());
    OutputAssembler a(&tok(), true, {" gamma"});
    OutputAssembler::Piece piece = a.add(*ids);
    EXPECT_EQ(piece.text, "alpha beta");
    EXPECT_TRUE(a.stopped());
    EXPECT_LT(piece.token_ids.size(), ids->size());
    EXPECT_EQ(piece.token_ids, a.tokenIds());
}

TEST_F(OutputAssemblerTest, SpecialTokensAndBrokenCharacters) {
    const auto im_end = tok().tokenToId("<|im_end|>");
    ASSERT_TRUE(im_end.has_value());
    auto ids = tok().encode("hi \xF0\x9F\x98\x80");  // an emoji of several byte tokens
    ASSERT_TRUE(ids.isOk());
    std::vector<int32_t> all = *ids;
    all.push_back(*im_end);
    OutputAssembler skip(&tok(), true, {});
    std::string shown;
    for (int32_t id : all) shown += skip.add(std::span<const int32_t>(&id, 1)).text;
    EXPECT_EQ(shown + skip.finish(), "hi \xF0\x9F\x98\x80");
    OutputAssembler keep(&tok(), false, {});
    EXPECT_EQ(keep.add(all).text + keep.finish(), "hi \xF0\x9F\x98\x80<|im_end|>");
    // An incomplete character at the end becomes U+FFFD.
    OutputAssembler cut(&tok(), true, {});
    std::vector<int32_t> partial(ids->begin(), ids->end() - 1);
    EXPECT_EQ(cut.add(partial).text + cut.finish(), tok().decode(partial));
}

TEST(OutputAssemblerNoTokenizerTest, IdsOnly) {
    OutputAssembler a(nullptr, true, {});
    const std::vector<int32_t> ids = {5, 6, 7};
    OutputAssembler::Piece piece = a.add(ids);
    EXPECT_EQ(piece.text, "");
    EXPECT_EQ(piece.token_ids, ids);
    EXPECT_EQ(a.finish(), "");
}

}  // namespace
}  // namespace afd::serve
