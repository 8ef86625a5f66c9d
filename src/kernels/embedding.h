// Token embedding lookup: out[t] = float(table[ids[t]]).
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace afd::kernels {

struct EmbeddingParams {
    int64_t num_tokens = 0;
    int64_t vocab_size = 0;
    int64_t hidden = 0;
    const int32_t* ids = nullptr;       // [T], each in [0, vocab_size) (checked)
    const core::Bf16* table = nullptr;  // [vocab_size, hidden]
    float* out = nullptr;               // [T, hidden]
};

void embeddingCpu(const EmbeddingParams& params);

}  // namespace afd::kernels
