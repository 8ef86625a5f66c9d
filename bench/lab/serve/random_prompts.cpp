#include "lab/serve/random_prompts.h"

#include <array>
#include <cmath>
#include <string_view>

#include "core/check.h"

namespace afd::lab {
namespace {

// Words that byte-level BPE vocabularies of English hold as one token each (with their leading space).
constexpr std::array<std::string_view, 32> kWords = {
    " the",  " of",    " and", " to",   " in",  " is",  " that", " for", " it",   " as",  " was",
    " with", " be",    " by",  " on",   " not", " he",  " this", " are", " or",   " his", " from",
    " at",   " which", " but", " have", " an",  " had", " they", " you", " were", " one"};

}  // namespace

int64_t sampleLength(int64_t len, double range_ratio, std::mt19937_64& rng) {
    AFD_CHECK(len >= 1, "sampleLength: len {} must be at least 1", len);
    AFD_CHECK(range_ratio >= 0 && range_ratio < 1, "sampleLength: range ratio {} must be in [0, 1)", range_ratio);
    const auto low =
        std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - range_ratio))));
    const auto high =
        std::max<int64_t>(low, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 + range_ratio))));
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

std::vector<BenchPrompt> randomPrompts(const RandomPromptOptions& options) {
    AFD_CHECK(options.num_prompts >= 0, "randomPrompts: num_prompts {} is negative", options.num_prompts);
    AFD_CHECK(options.vocab_size >= 2, "randomPrompts: vocab_size {} must be at least 2", options.vocab_size);
    std::mt19937_64 rng(options.seed);
    std::vector<BenchPrompt> prompts(static_cast<size_t>(options.num_prompts));
    for (size_t i = 0; i < prompts.size(); ++i) {
        BenchPrompt& p = prompts[i];
        p.input_len = sampleLength(options.input_len, options.range_ratio, rng);
        p.output_len = sampleLength(options.output_len, options.range_ratio, rng);
        // As vllm: a random start per prompt plus the prompt's index, then consecutive ids.
        const auto start = std::uniform_int_distribution<int64_t>(0, options.vocab_size - 1)(rng);
        if (options.text) {
            p.text.reserve(static_cast<size_t>(p.input_len) * 5);
            for (int64_t t = 0; t < p.input_len; ++t) {
                p.text += kWords[static_cast<size_t>((start + static_cast<int64_t>(i) + t) % kWords.size())];
            }
        } else {
            p.ids.resize(static_cast<size_t>(p.input_len));
            for (int64_t t = 0; t < p.input_len; ++t) {
                p.ids[static_cast<size_t>(t)] =
                    static_cast<int32_t>((start + static_cast<int64_t>(i) + t) % options.vocab_size);
            }
        }
    }
    return prompts;
}

}  // namespace afd::lab
