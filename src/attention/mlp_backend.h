// Where the MLP/MoE block of each decoder layer runs, seen from the model runner.
//
// The runner calls, per step: beginStep; then for each layer and stage: submit (start the block on that stage's
// post-attention-norm activations) and later collect (wait until its output is in `out`); then endStep.
// Submit and collect are split so that a remote backend can overlap one stage's transfer with the other
// stage's attention (dual-batch overlap). All calls come from the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace afd::attention {

struct StepPlan {
    uint64_t step = 0;
    std::vector<int64_t> stage_tokens;  // tokens of each stage (1 stage, or 2 under dual-batch overlap)
    bool last = false;                  // no further steps will follow (the rank is leaving)
};

class MlpBackend {
public:
    virtual ~MlpBackend() = default;

    virtual core::Status beginStep(const StepPlan& plan) = 0;
    // x [num_tokens, H] FP32 stays valid and unmodified until the matching collect returns; the result goes to
    // out [num_tokens, H] FP32, which is written by the time collect returns.
    virtual core::Status submit(int64_t layer, int stage, const float* x, int64_t num_tokens, float* out) = 0;
    virtual core::Status collect(int64_t layer, int stage) = 0;
    virtual core::Status endStep() = 0;
    // Per-layer time this backend spent, for reports; backends without a breakdown return an empty vector.
    struct LayerTiming {
        double compute_seconds = 0.0;   // local compute
        double transfer_seconds = 0.0;  // waiting on / moving data to and from peers
    };
    virtual std::vector<LayerTiming> layerTimings() const { return {}; }
};

}  // namespace afd::attention
