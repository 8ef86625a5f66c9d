// One request's state inside the engine: its tokens, how many have KV in the cache, its blocks, its sampling.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "attention/sampling_params.h"
#include "core/status.h"

namespace afd::attention {

enum class SequenceStatus { kWaiting, kRunning, kFinished };
// kAborted: cancelled by the caller (Engine::abort). kError: ended by a failure (a failed step, an engine that stopped
// serving, a shutdown); Sequence::error says why.
enum class FinishReason { kNone, kLength, kStop, kAborted, kError };

std::string_view finishReasonName(FinishReason reason);

struct Sequence {
    int64_t id = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    SamplingParams params;
    std::mt19937_64 rng;
    bool want_prompt_logits = false;
    std::vector<float> prompt_last_logits;  // logits at the last prompt position, when asked for

    SequenceStatus status = SequenceStatus::kWaiting;
    FinishReason finish_reason = FinishReason::kNone;
    core::Status error;           // finish_reason kError: why
    int64_t num_computed = 0;     // tokens whose KV is in the cache
    std::vector<int32_t> blocks;  // block table
    int64_t num_preemptions = 0;

    int64_t numTokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
    int32_t tokenAt(int64_t i) const {
        const auto n = static_cast<int64_t>(prompt.size());
        return i < n ? prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - n)];
    }
};

}  // namespace afd::attention
