// Picks the next token from a row of logits: greedy (temperature 0), or temperature + top-k + top-p sampling
// with the request's own random stream, so a seeded request is reproducible whatever else is in the batch.
#pragma once

#include <cstdint>
#include <random>

#include "attention/sampling_params.h"

namespace afd::attention {

int32_t sampleToken(const float* logits, int64_t vocab_size, const SamplingParams& params, std::mt19937_64& rng);

}  // namespace afd::attention
