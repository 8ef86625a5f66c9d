// Offline generation: run a fixed list of prompts through an Engine until every one finishes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attention/engine.h"
#include "attention/sampling_params.h"

namespace afd::attention {

struct GenerationResult {
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> new_ids;
    std::vector<float> prompt_last_logits;  // logits at the last prompt position
    FinishReason finish_reason = FinishReason::kNone;
};

// Results come back in prompt order. Calls engine.finish() at the end (also after an error) so AFD peers
// learn that this rank is done.
// `cancelled`, when given, is checked between steps: once it returns true the run ends with kCancelled.
core::Result<std::vector<GenerationResult>> generateOffline(Engine& engine,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            const SamplingParams& params, bool want_prompt_logits,
                                                            const std::function<bool()>& cancelled = {});

}  // namespace afd::attention
