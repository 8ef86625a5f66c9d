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
    std::vector<float> prompt_last_logits;  // logits at the last prompt position (when asked for)
    FinishReason finish_reason = FinishReason::kNone;
};

struct OfflineGeneration {
    // In prompt order. After a failed step, one per prompt with what it had generated: kError for those the failure
    // cut short. Empty when a prompt was refused before any step ran (status says which).
    std::vector<GenerationResult> results;
    core::Status status;  // ok, or why the run ended early

    bool isOk() const { return status.isOk(); }
};

// Calls engine.finish() at the end (also after an error) so AFD peers learn that this rank is done; a failed finish
// is the status when the run itself succeeded. The first failed step ends the run: the step's sequences and every
// other unfinished one end with kError.
// `cancelled`, when given, is checked between steps: once it returns true the run ends with kCancelled (the
// unfinished sequences with kAborted).
OfflineGeneration generateOffline(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                  const SamplingParams& params, bool want_prompt_logits,
                                  const std::function<bool()>& cancelled = {});

}  // namespace afd::attention
