// The prompts of `afd bench serve --dataset random`: lengths sampled as `vllm bench serve` samples them (uniform
// integers in [len * (1 - r), len * (1 + r)]) and prompts made either of token ids (the length is exact: the server
// takes token-id prompts on /v1/completions) or of text (a run of common words; the server's tokenizer decides the
// length, which its usage report then gives).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace afd::lab {

struct RandomPromptOptions {
    int64_t num_prompts = 1000;
    int64_t input_len = 1024;
    int64_t output_len = 128;
    double range_ratio = 0.0;  // in [0, 1)
    int64_t vocab_size = 500;  // token ids are drawn from [0, vocab_size): below any vocabulary afd serves
    bool text = false;         // text prompts instead of token ids
    uint64_t seed = 0;
};

struct BenchPrompt {
    std::vector<int32_t> ids;  // when the prompt is token ids
    std::string text;          // when it is text
    int64_t input_len = 0;     // tokens asked for (exact for ids)
    int64_t output_len = 0;    // max_tokens sent
};

// A length from [floor(len * (1 - r)), floor(len * (1 + r))], at least 1. Preconditions (AFD_CHECK): len >= 1,
// r in [0, 1).
int64_t sampleLength(int64_t len, double range_ratio, std::mt19937_64& rng);

// `options.num_prompts` prompts, deterministic for the seed. Prompts differ from each other from their first token
// (so a server's prefix cache does not make them cheap). Preconditions (AFD_CHECK) as sampleLength, vocab_size >= 2.
std::vector<BenchPrompt> randomPrompts(const RandomPromptOptions& options);

}  // namespace afd::lab
