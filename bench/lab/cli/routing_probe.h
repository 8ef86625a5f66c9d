// RoutingProbe: an MlpBackend that forwards every call to the backend it wraps and, for `afd bench generate`, watches
// the steps: the tokens of every step that calls beginStep (eager steps; a replayed decode graph calls nothing), and,
// in one step that arm() asks for, the router's top-k ids of the first `rows` rows of every MoE layer (the decode rows
// of a mixed step), run on the device (kernels::routerForwardCuda, the CUDA router the MLP blocks use) and copied to
// pinned host memory, so that the bench can count the experts a decode step touches.
//
// Streams: the probe's router and copy are enqueued on the ops' stream before the wrapped submit, so they read x before
// anything after them; routedExperts() synchronises that stream. Arm it only for a step that runs eagerly (not one that
// is captured or replayed). Shapes the CUDA router does not take (experts not a multiple of 32 or above 256, hidden not
// a multiple of 16, top-k above 32) record nothing. Engine thread only. Built with the GPU attention side only.
#pragma once

#if defined(AFD_HAVE_CUDA_ATTENTION)

#include <cstdint>
#include <memory>
#include <vector>

#include "attention/device_ops.h"
#include "attention/mlp_backend.h"
#include "kernels/cuda/device_memory.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::lab {

class RoutingProbe : public attention::MlpBackend {
public:
    // `weights` on ops' device (the routers read from them); `max_rows`: the most rows arm() may ask for.
    RoutingProbe(std::unique_ptr<attention::MlpBackend> inner, const model::ModelConfig& config,
                 const model::ModelWeights& weights, attention::DeviceOps& ops, int64_t max_rows);

    void reserve(const attention::StepLimits& limits) override { inner_->reserve(limits); }
    core::Status beginStep(const attention::StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override { return inner_->collect(layer, stage); }
    core::Status endStep() override { return inner_->endStep(); }
    core::Status resetAfterFailedStep() override { return inner_->resetAfterFailedStep(); }
    core::Status beforeReplay(const attention::StepPlan& plan) override { return inner_->beforeReplay(plan); }
    core::Status checkStepCompleted() override { return inner_->checkStepCompleted(); }
    std::span<const LayerTiming> stepLayerTimings() const override { return inner_->stepLayerTimings(); }
    bool capturable() const override { return inner_->capturable(); }
    std::vector<LayerTiming> layerTimings() const override { return inner_->layerTimings(); }

    // Steps that called beginStep, and the tokens of the last one (a padded step counts its real rows as planned).
    uint64_t stepsSeen() const { return steps_seen_; }
    int64_t lastStepTokens() const { return last_step_tokens_; }

    // The next step records the top-k ids of its first `rows` rows (<= max_rows) at every MoE layer.
    void arm(int64_t rows);
    // After the armed step: per MoE layer, the distinct experts among those ids; empty when the step called no
    // submit (it was replayed). Disarms.
    std::vector<double> routedExperts();

private:
    std::unique_ptr<attention::MlpBackend> inner_;
    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    attention::DeviceOps& ops_;
    int64_t max_rows_ = 0;
    bool router_supported_ = false;
    std::vector<int64_t> moe_index_;  // per layer: its index among the MoE layers, or -1
    kernels::cuda::DeviceBuffer ids_;
    kernels::cuda::DeviceBuffer topk_weights_;
    kernels::cuda::DeviceBuffer workspace_;
    kernels::cuda::PinnedBuffer host_ids_;  // [MoE layers, max_rows, K]
    uint64_t steps_seen_ = 0;
    int64_t last_step_tokens_ = 0;
    int64_t armed_rows_ = 0;
    std::vector<int64_t> recorded_;  // per MoE layer: rows of the armed step routed so far
};

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA_ATTENTION
