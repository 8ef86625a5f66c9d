// Small made-up tokenizers (tests/data/tokenizer-synthetic/golden.json, from HF tokenizers 0.23.2 itself): each
// exercises one part of the pipeline, and every id and decode must equal HF's. Plus the pair-form merges on a
// tokenizer.json written here.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace afd::tokenizer {
namespace {

using nlohmann::json;

TEST(SyntheticTokenizers, IdsAndDecodesEqualHfTokenizers) {
    const json golden = json::parse(testing::readFile(std::string(AFD_TEST_DATA) + "/tokenizer-synthetic/golden.json"));
    ASSERT_GE(golden["cases"].size(), 20u);
    for (const json& c : golden["cases"]) {
        const std::string name = c["name"];
        for (const bool jit : {true, false}) {
            core::Result<Tokenizer> tok = Tokenizer::fromJson(c["tokenizer"].dump(), name, {.use_jit = jit});
            ASSERT_TRUE(tok.isOk()) << tok.status().toString();
            for (const json& r : c["results"]) {
                const std::string text = r["text"];
                core::Result<std::vector<TokenId>> ids = tok->encode(text);
                ASSERT_TRUE(ids.isOk()) << ids.status().toString();
                EXPECT_EQ(*ids, r["ids"].get<std::vector<TokenId>>()) << name << ": " << text;
                EXPECT_EQ(tok->decode(*ids), r["decoded"].get<std::string>()) << name << ": " << text;
                EXPECT_EQ(tok->decode(*ids, {.skip_special_tokens = true}),
                          r["decoded_skip_special"].get<std::string>())
                    << name << ": " << text;
            }
        }
    }
}

// A byte-level tokenizer: the 256 byte characters (id = byte), then one token per merge.
json tinyTokenizer(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_form) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[bytesToAlphabet(std::string(1, static_cast<char>(b)))] = b;
    json merge_list = json::array();
    for (const auto& [a, b] : merges) {
        const std::string left = bytesToAlphabet(a);
        const std::string right = bytesToAlphabet(b);
        if (!vocab.contains(left + right)) {
            const size_t id = vocab.size();
            vocab[left + right] = id;
        }
        if (pair_form) {
            merge_list.push_back({left, right});
        } else {
            merge_list.push_back(left + " " + right);
        }
    }
    return {{"version", "1.0"},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::vector<TokenId> encode(const json& tokenizer_json, std::string_view text) {
    core::Result<Tokenizer> tok = Tokenizer::fromJson(tokenizer_json.dump(), "test");
    EXPECT_TRUE(tok.isOk()) << tok.status().toString();
    if (!tok.isOk()) return {};
    core::Result<std::vector<TokenId>> ids = tok->encode(text);
    EXPECT_TRUE(ids.isOk());
    return ids.isOk() ? *ids : std::vector<TokenId>{};
}

TEST(SyntheticTokenizers, PairFormMergesEqualStringForm) {
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}};
    // ids: h e -> 256, l l -> 257, he ll -> 258, hell o -> 259, " " w -> 260, o r -> 261, " w" or -> 262.
    for (const bool pair_form : {true, false}) {
        EXPECT_EQ(encode(tinyTokenizer(merges, pair_form), "hello world"), (std::vector<TokenId>{259, 262, 'l', 'd'}))
            << (pair_form ? "pair form" : "string form");
    }
}

TEST(SyntheticTokenizers, LowerRankMergesFirstAndLeftmostAmongEqualRanks) {
    // "abc": a b (rank 0) before b c (rank 1) gives [ab, c]; the other order gives [a, bc].
    EXPECT_EQ(encode(tinyTokenizer({{"a", "b"}, {"b", "c"}}, true), "abc"), (std::vector<TokenId>{256, 'c'}));
    EXPECT_EQ(encode(tinyTokenizer({{"b", "c"}, {"a", "b"}}, true), "abc"), (std::vector<TokenId>{'a', 256}));
    // "aaa" with a a: the leftmost pair merges, then nothing is left to pair.
    EXPECT_EQ(encode(tinyTokenizer({{"a", "a"}}, true), "aaa"), (std::vector<TokenId>{256, 'a'}));
    EXPECT_EQ(encode(tinyTokenizer({{"a", "a"}, {"aa", "aa"}}, true), "aaaaa"), (std::vector<TokenId>{257, 'a'}));
}

}  // namespace
}  // namespace afd::tokenizer
