// CudaMlpBackend: every MLP/MoE block of the dense GPU engine in this process, on the ops' stream (CudaMlpKernels):
// MoE layers run the router, then the routed experts (all of the model's); dense MLP layers (mlp_only_layers,
// decoder_sparse_step) the SwiGLU MLP as one expert. Activations are BF16 on the GPU. Submit only enqueues and collect
// does nothing, so a step can be captured in a CUDA graph; in a padded step (StepPlan::num_valid_tokens) the padding
// rows are routed nowhere. Engine thread only.
#pragma once

#include <memory>

#include "attention/cuda/cuda_mlp_kernels.h"
#include "attention/device_ops.h"
#include "attention/mlp_backend.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class CudaMlpBackend final : public MlpBackend {
public:
    // `weights`: the whole model on cuda:gpu (device_weights.h); `stream`: the ops' stream. Both outlive the backend.
    CudaMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights, int gpu, void* stream);

    void reserve(const StepLimits& limits) override;
    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override;
    bool capturable() const override { return true; }

private:
    const model::ModelConfig& config_;
    const int gpu_;
    CudaMlpKernels kernels_;
    const int32_t* num_valid_ = nullptr;  // this step's, when it is padded
};

// The CUDA MLP backend for `ops` (a CUDA device; weights on it with every expert): errors name what does not fit.
core::Result<std::unique_ptr<MlpBackend>> createCudaMlpBackend(const model::ModelConfig& config,
                                                               const model::ModelWeights& weights,
                                                               const DeviceOps& ops);

}  // namespace afd::attention
