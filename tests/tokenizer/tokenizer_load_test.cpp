// Broken tokenizer.json files: every refusal names the file, the field and the rule.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/subprocess_util.h"
#include "tokenizer/tokenizer.h"

namespace afd::tokenizer {
namespace {

using nlohmann::json;

json minimal() {
    json vocab = json::object();
    vocab["a"] = 0;
    vocab["b"] = 1;
    vocab["ab"] = 2;
    return {
        {"version", "1.0"},
        {"added_tokens", json::array({{{"id", 3}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array(
               {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}}};
}

// Loads `doc` from a file and returns the error message ("" when it loads).
std::string loadError(const json& doc) {
    afd::testing::TempDir dir;
    const std::string path = dir.file("tokenizer.json");
    std::ofstream(path) << doc.dump();
    const core::Result<Tokenizer> tok = Tokenizer::fromFile(path);
    if (tok.isOk()) return "";
    EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status().message();
    return tok.status().message();
}

#define EXPECT_MESSAGE_HAS(message, needle) \
    EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message)

TEST(TokenizerLoad, MinimalLoads) { EXPECT_EQ(loadError(minimal()), ""); }

TEST(TokenizerLoad, MissingFileNamesIt) {
    const core::Result<Tokenizer> tok = Tokenizer::fromFile("/nonexistent/tokenizer.json");
    ASSERT_FALSE(tok.isOk());
    EXPECT_MESSAGE_HAS(tok.status().message(), "/nonexistent/tokenizer.json");
}

TEST(TokenizerLoad, NotJson) {
    afd::testing::TempDir dir;
    std::ofstream(dir.file("t.json")) << "{\"model\": ";
    const core::Result<Tokenizer> tok = Tokenizer::fromFile(dir.file("t.json"));
    ASSERT_FALSE(tok.isOk());
    EXPECT_EQ(tok.status().code(), core::StatusCode::kCorrupt);
    EXPECT_MESSAGE_HAS(tok.status().message(), "not valid JSON");
}

TEST(TokenizerLoad, DeepNestingIsRefusedWhileParsing) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const core::Result<Tokenizer> tok = Tokenizer::fromJson(deep, "deep.json");
    ASSERT_FALSE(tok.isOk());
    EXPECT_MESSAGE_HAS(tok.status().message(), "nested more than 64 levels");
}

TEST(TokenizerLoad, MergeErrorsNameTheMergeAndTheRule) {
    json doc = minimal();
    doc["model"]["merges"] = json::array({"a b", "a b c"});
    EXPECT_MESSAGE_HAS(loadError(doc), "model.merges[1] must be two tokens separated by one space");
    doc["model"]["merges"] = json::array({"a b", json::array({"a", 7})});
    EXPECT_MESSAGE_HAS(loadError(doc), "model.merges[1] must be a string \"left right\" or a list of two strings");
    doc["model"]["merges"] = json::array({json::array({"a", "x"})});
    EXPECT_MESSAGE_HAS(loadError(doc), "merges[0] (\"a\", \"x\"): its right token is not in the vocab");
    doc["model"]["merges"] = json::array({json::array({"b", "a"})});
    EXPECT_MESSAGE_HAS(loadError(doc), "merges[0] (\"b\", \"a\"): their join is not in the vocab");
}

TEST(TokenizerLoad, VocabErrors) {
    json doc = minimal();
    doc["model"]["vocab"]["c"] = "three";
    EXPECT_MESSAGE_HAS(loadError(doc), "model.vocab[\"c\"] must be an integer");
    doc["model"]["vocab"]["c"] = -1;
    EXPECT_MESSAGE_HAS(loadError(doc), "model.vocab[\"c\"] must be in [0, ");
    doc["model"]["vocab"]["c"] = 1;
    EXPECT_MESSAGE_HAS(loadError(doc), "are both 1, and ids must be distinct");
    doc = minimal();
    doc["model"].erase("vocab");
    EXPECT_MESSAGE_HAS(loadError(doc), "model.vocab must be an object of token: id");
}

TEST(TokenizerLoad, UnsupportedComponentsSayWhatIs) {
    json doc = minimal();
    doc["model"]["type"] = "WordPiece";
    EXPECT_MESSAGE_HAS(loadError(doc), "model.type \"WordPiece\" is not supported (BPE is)");
    doc = minimal();
    doc["normalizer"] = {{"type", "Lowercase"}};
    EXPECT_MESSAGE_HAS(loadError(doc), "normalizer.type \"Lowercase\" is not supported");
    doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace";
    EXPECT_MESSAGE_HAS(loadError(doc), "pre_tokenizer.pretokenizers[0].type \"Whitespace\" is not supported");
    doc = minimal();
    doc["decoder"] = {{"type", "WordPiece"}};
    EXPECT_MESSAGE_HAS(loadError(doc), "decoder.type \"WordPiece\" is not supported (ByteLevel is)");
    doc = minimal();
    doc["model"]["dropout"] = 0.1;
    EXPECT_MESSAGE_HAS(loadError(doc), "model.dropout must be null or 0");
    doc = minimal();
    doc["model"]["continuing_subword_prefix"] = "##";
    EXPECT_MESSAGE_HAS(loadError(doc), "model.continuing_subword_prefix must be null or \"\"");
    doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"] =
        json::array({doc["pre_tokenizer"]["pretokenizers"][1], doc["pre_tokenizer"]["pretokenizers"][0]});
    EXPECT_MESSAGE_HAS(loadError(doc), "a Split after ByteLevel is not supported");
}

TEST(TokenizerLoad, PreTokenizerErrors) {
    json doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    EXPECT_MESSAGE_HAS(loadError(doc),
                       "pre_tokenizer.pretokenizers[0].pattern: the regular expression does not compile");
    doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
    EXPECT_MESSAGE_HAS(loadError(doc), "pre_tokenizer.pretokenizers[0].behavior must be Removed, Isolated");
    doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "*"}};
    EXPECT_MESSAGE_HAS(loadError(doc), "pre_tokenizer.pretokenizers[0].pattern must hold \"Regex\" or \"String\"");
    doc = minimal();
    doc["pre_tokenizer"]["pretokenizers"][0]["invert"] = "maybe";
    EXPECT_MESSAGE_HAS(loadError(doc), "pre_tokenizer.pretokenizers[0].invert must be a boolean");
}

TEST(TokenizerLoad, AddedTokenErrors) {
    json doc = minimal();
    doc["added_tokens"][0]["id"] = 9;
    EXPECT_MESSAGE_HAS(loadError(doc), "added_tokens[0] \"<s>\" states id 9, but its id is 3");
    doc = minimal();
    doc["added_tokens"][0]["content"] = "";
    EXPECT_MESSAGE_HAS(loadError(doc), "added_tokens[0].content must not be empty");
    doc = minimal();
    doc["added_tokens"].push_back(doc["added_tokens"][0]);
    doc["added_tokens"][1]["id"] = 4;
    EXPECT_MESSAGE_HAS(loadError(doc), "added_tokens[1].content \"<s>\" is listed twice");
    doc = minimal();
    doc["added_tokens"][0]["special"] = 2;
    EXPECT_MESSAGE_HAS(loadError(doc), "added_tokens[0].special must be a boolean");
    doc = minimal();
    doc["added_tokens"][0]["content"] = "ab";  // in the vocab: its id there is 2
    doc["added_tokens"][0]["id"] = 2;
    EXPECT_EQ(loadError(doc), "");
}

}  // namespace
}  // namespace afd::tokenizer
