#include "lab/serve/random_prompts.h"

#include <gtest/gtest.h>

#include <set>

namespace afd::lab {
namespace {

TEST(SampleLength, StaysInTheRangeAndReachesBothEnds) {
    std::mt19937_64 rng(3);
    std::set<int64_t> seen;
    for (int i = 0; i < 20000; ++i) {
        const int64_t len = sampleLength(100, 0.25, rng);
        ASSERT_GE(len, 75);
        ASSERT_LE(len, 125);
        seen.insert(len);
    }
    EXPECT_EQ(seen.size(), 51u);  // every value of [75, 125]
}

TEST(SampleLength, RatioZeroIsExactAndShortLengthsStayPositive) {
    std::mt19937_64 rng(3);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(sampleLength(64, 0.0, rng), 64);
    for (int i = 0; i < 1000; ++i) EXPECT_GE(sampleLength(1, 0.9, rng), 1);
}

TEST(RandomPrompts, IdPromptsHaveTheirLengthAndStayInTheVocabulary) {
    RandomPromptOptions options;
    options.num_prompts = 200;
    options.input_len = 40;
    options.output_len = 10;
    options.range_ratio = 0.5;
    options.vocab_size = 37;
    options.seed = 9;
    const auto prompts = randomPrompts(options);
    ASSERT_EQ(prompts.size(), 200u);
    std::set<int32_t> first_ids;
    for (const auto& p : prompts) {
        EXPECT_TRUE(p.text.empty());
        ASSERT_EQ(static_cast<int64_t>(p.ids.size()), p.input_len);
        EXPECT_GE(p.input_len, 20);
        EXPECT_LE(p.input_len, 60);
        EXPECT_GE(p.output_len, 5);
        EXPECT_LE(p.output_len, 15);
        for (const int32_t id : p.ids) {
            ASSERT_GE(id, 0);
            ASSERT_LT(id, 37);
        }
        first_ids.insert(p.ids[0]);
    }
    EXPECT_GT(first_ids.size(), 10u);
    EXPECT_EQ(randomPrompts(options)[17].ids, prompts[17].ids);  // the seed fixes them
}

TEST(RandomPrompts, TextPromptsHaveOneWordPerToken) {
    RandomPromptOptions options;
    options.num_prompts = 3;
    options.input_len = 12;
    options.text = true;
    for (const auto& p : randomPrompts(options)) {
        EXPECT_TRUE(p.ids.empty());
        int64_t words = 0;
        for (const char c : p.text) words += c == ' ' ? 1 : 0;
        EXPECT_EQ(words, 12);
        EXPECT_EQ(p.input_len, 12);
    }
}

}  // namespace
}  // namespace afd::lab
