// Per-request sampling settings, as an OpenAI-style API exposes them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace afd::attention {

struct SamplingParams {
    int64_t max_tokens = 16;
    float temperature = 0.0f;  // 0 = greedy
    int64_t top_k = 0;         // 0 = off
    float top_p = 1.0f;        // 1 = off
    uint64_t seed = 0;         // per-request random stream (used when temperature > 0)
    bool ignore_eos = false;   // keep going past end-of-sequence tokens
    std::vector<int32_t> stop_token_ids;

    // Ranges: max_tokens >= 1, temperature >= 0, top_k >= 0, 0 < top_p <= 1. Messages name the field.
    core::Status validate() const;
};

}  // namespace afd::attention
