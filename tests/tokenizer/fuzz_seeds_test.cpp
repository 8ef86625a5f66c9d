// The seeds of fuzz/tokenizer_fuzz.cpp (fuzz/corpus/tokenizer/) give what they were made for: text round-trips
// through the Qwen3 tokenizer to its NFC form (invalid UTF-8 repaired first), and the id seed decodes to the emoji
// its byte tokens spell.
#include <gtest/gtest.h>

#include <filesystem>

#include "tokenizer/decode_stream.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace afd::tokenizer {
namespace {

using FuzzSeeds = testing::Qwen3TokenizerTest;

const std::filesystem::path kSeeds = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/tokenizer";

TEST_F(FuzzSeeds, TextSeedsRoundTripToTheirNfc) {
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kSeeds)) {
        if (entry.path().filename() == "ids.bin") continue;
        const std::string bytes = testing::readFile(entry.path().string());
        const core::Result<std::vector<TokenId>> ids = tok().encode(bytes, {.invalid_utf8 = InvalidUtf8::kReplace});
        ASSERT_TRUE(ids.isOk()) << entry.path();
        const std::string expected = normalizeUnicode(utf8Lossy(bytes), UnicodeForm::kNfc).value();
        EXPECT_EQ(tok().decode(*ids), expected) << entry.path();
        EXPECT_EQ(isValidUtf8(bytes), entry.path().extension() != ".bin") << entry.path();
        ++seeds;
    }
    EXPECT_GE(seeds, 9u);
}

TEST_F(FuzzSeeds, IdSeedDecodesToTheEmojiItsBytesSpell) {
    const std::string bytes = testing::readFile((kSeeds / "ids.bin").string());
    ASSERT_EQ(bytes.size(), 32u);
    std::vector<TokenId> ids;
    for (size_t i = 0; i < bytes.size(); i += 4) {
        uint32_t v = 0;
        for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(bytes[i + k]);
        ids.push_back(static_cast<TokenId>(v & 0x7FFFFFFFu));  // what the target reads, for ids below its limits
    }
    // 😀 from its four byte tokens, <|im_end|>, an id that is no token, then an emoji's first two bytes.
    EXPECT_EQ(tok().decode(ids), "😀<|im_end|>" + std::string(kReplacementCharacter));
    DecodeStream stream(tok());
    std::string joined;
    for (const TokenId id : ids) joined += stream.step(id);
    EXPECT_EQ(stream.pendingBytes(), 2u);
    EXPECT_EQ(joined + stream.flush(), tok().decode(ids));
}

}  // namespace
}  // namespace afd::tokenizer
