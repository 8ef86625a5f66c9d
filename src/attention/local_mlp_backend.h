// Runs every MLP/MoE block in this process (the dense reference): router, top-k and the routed experts on MoE
// layers, the SwiGLU MLP on dense layers. Also used for the layers an m2n attention rank keeps local.
#pragma once

#include <vector>

#include "attention/mlp_backend.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class LocalMlpBackend : public MlpBackend {
public:
    LocalMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights);

    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const float* x, int64_t num_tokens, float* out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override;
    std::vector<LayerTiming> layerTimings() const override { return timings_; }

private:
    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    std::vector<LayerTiming> timings_;
};

}  // namespace afd::attention
