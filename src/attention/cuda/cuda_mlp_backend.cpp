#include "attention/cuda/cuda_mlp_backend.h"

#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::attention {

CudaMlpBackend::CudaMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights, int gpu,
                               void* stream)
    : config_(config), gpu_(gpu), kernels_(config, weights, gpu, static_cast<cudaStream_t>(stream)) {
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const model::MlpLayerWeights& w = weights.mlp[static_cast<size_t>(l)];
        AFD_CHECK(w.hasExperts(), "CUDA MLP backend: layer {} has no MLP weights on the GPU", l);
        if (config.isMoeLayer(l)) {
            AFD_CHECK(w.router.rawData() != nullptr && w.expert_begin == 0 && w.expert_end == config.num_experts,
                      "CUDA MLP backend: MoE layer {} must hold its router and all {} experts, holds [{}, {})", l,
                      config.num_experts, w.expert_begin, w.expert_end);
        }
    }
}

void CudaMlpBackend::reserve(const StepLimits& limits) { kernels_.reserve(limits.max_tokens); }

core::Status CudaMlpBackend::beginStep(const StepPlan& plan) {
    num_valid_ = nullptr;
    if (plan.padded()) {
        AFD_CHECK(plan.stage_tokens.size() == 1, "CUDA MLP backend: a padded step of {} stages",
                  plan.stage_tokens.size());
        AFD_CHECK(plan.num_valid_tokens.device() == core::Device::cuda(gpu_) &&
                      plan.num_valid_tokens.dtype() == core::DType::kI32 && plan.num_valid_tokens.numel() == 1,
                  "CUDA MLP backend: num_valid_tokens must be [1] I32 on cuda:{}", gpu_);
        num_valid_ = plan.num_valid_tokens.data<int32_t>();
    }
    return core::Status::ok();
}

core::Status CudaMlpBackend::submit(int64_t layer, int, const core::Tensor& x, const core::Tensor& out) {
    const core::Device device = core::Device::cuda(gpu_);
    AFD_CHECK(x.device() == device && out.device() == device && x.dtype() == core::DType::kBf16 &&
                  out.dtype() == core::DType::kF32,
              "CUDA MLP backend reads BF16 and writes FP32 tensors on {}, got {} on {} into {} on {}",
              device.toString(), core::dtypeName(x.dtype()), x.device().toString(), core::dtypeName(out.dtype()),
              out.device().toString());
    AFD_CHECK(x.dim() == 2 && x.size(1) == config_.hidden_size && out.shape() == x.shape(),
              "CUDA MLP backend: x {} and out {} must be [n, {}]", core::shapeToString(x.shape()),
              core::shapeToString(out.shape()), config_.hidden_size);
    const int64_t n = x.size(0);
    if (n == 0) return core::Status::ok();
    // NOTE: the engine reserves for its steps; a larger call (outside an engine, never in a capture) grows here.
    kernels_.reserve(n);
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    const auto* in = static_cast<const core::Bf16*>(x.rawData());
    auto* result = static_cast<float*>(out.rawData());
    if (config_.isMoeLayer(layer)) {
        kernels_.route(layer, in, n, num_valid_);
        kernels_.experts(layer, in, n, result);
    } else {
        kernels_.dense(layer, in, n, result);
    }
    return core::Status::ok();
}

core::Status CudaMlpBackend::collect(int64_t, int) { return core::Status::ok(); }

core::Status CudaMlpBackend::endStep() {
    num_valid_ = nullptr;
    return core::Status::ok();
}

core::Result<std::unique_ptr<MlpBackend>> createCudaMlpBackend(const model::ModelConfig& config,
                                                               const model::ModelWeights& weights,
                                                               const DeviceOps& ops) {
    const core::Device device = ops.device();
    if (device.isCpu()) return core::invalidArgument("the CUDA MLP backend needs CUDA ops, got {}", device.toString());
    try {
        return std::unique_ptr<MlpBackend>(
            std::make_unique<CudaMlpBackend>(config, weights, device.index, ops.stream()));
    } catch (const core::Error& e) {
        return core::invalidArgument("the CUDA MLP backend on {}: {}", device.toString(), e.what());
    }
}

}  // namespace afd::attention
