// Runs every MLP/MoE block in this process (the dense reference) on the host: router, top-k and the routed experts on
// MoE layers, the SwiGLU MLP on dense layers (kernels::mlpBlockCpu). Activations are FP32 host tensors (CpuOps);
// each submit computes the block before it returns.
#pragma once

#include <memory>
#include <vector>

#include "attention/device_ops.h"
#include "attention/mlp_backend.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class LocalMlpBackend : public MlpBackend {
public:
    // bf16_intermediates: the experts' h and y rounded to bf16 (the reference at the GPU engine's precision, with
    // CpuPrecision::kBf16Activations).
    LocalMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                    bool bf16_intermediates = false);

    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override;
    bool capturable() const override { return true; }
    std::vector<LayerTiming> layerTimings() const override { return timings_; }

private:
    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    bool bf16_intermediates_;
    std::vector<LayerTiming> timings_;
};

// The backend that runs every MLP/MoE block on `ops`' device: LocalMlpBackend on the host, CudaMlpBackend
// (attention/cuda/cuda_mlp_backend.h) on a GPU, with `weights` on that device; kUnsupported naming the device in a
// build without the CUDA backend.
core::Result<std::unique_ptr<MlpBackend>> createLocalMlpBackend(const model::ModelConfig& config,
                                                                const model::ModelWeights& weights,
                                                                const DeviceOps& ops);

}  // namespace afd::attention
