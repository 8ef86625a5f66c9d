#include "attention/local_mlp_backend.h"

#include <chrono>

#include "attention/cpu_ops.h"
#include "core/check.h"
#include "kernels/mlp_block.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "attention/cuda/cuda_mlp_backend.h"
#endif

namespace afd::attention {

LocalMlpBackend::LocalMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                                 bool bf16_intermediates)
    : config_(config),
      weights_(weights),
      bf16_intermediates_(bf16_intermediates),
      timings_(static_cast<size_t>(config.num_hidden_layers)) {}

core::Status LocalMlpBackend::beginStep(const StepPlan&) { return core::Status::ok(); }

core::Status LocalMlpBackend::submit(int64_t layer, int, const core::Tensor& x, const core::Tensor& out) {
    AFD_CHECK(x.device().isCpu() && out.device().isCpu() && x.dtype() == core::DType::kF32 &&
                  out.dtype() == core::DType::kF32,
              "LocalMlpBackend runs on FP32 host tensors, got {} on {} into {} on {}", core::dtypeName(x.dtype()),
              x.device().toString(), core::dtypeName(out.dtype()), out.device().toString());
    AFD_CHECK(x.dim() == 2 && x.size(1) == config_.hidden_size && out.shape() == x.shape(),
              "LocalMlpBackend: x {} and out {} must be [n, {}]", core::shapeToString(x.shape()),
              core::shapeToString(out.shape()), config_.hidden_size);
    const auto start = std::chrono::steady_clock::now();
    kernels::mlpBlockCpu(config_, weights_.mlp[static_cast<size_t>(layer)], x.data<float>(), x.size(0),
                         out.data<float>(), bf16_intermediates_);
    timings_[static_cast<size_t>(layer)].compute_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return core::Status::ok();
}

core::Status LocalMlpBackend::collect(int64_t, int) { return core::Status::ok(); }
core::Status LocalMlpBackend::endStep() { return core::Status::ok(); }

core::Result<std::unique_ptr<MlpBackend>> createLocalMlpBackend(const model::ModelConfig& config,
                                                                const model::ModelWeights& weights,
                                                                const DeviceOps& ops) {
    if (ops.device().isCpu()) {
        // A CpuOps at the GPU engine's precision rounds the experts' intermediates as the GPU kernels store them.
        const auto* cpu = dynamic_cast<const CpuOps*>(&ops);
        const bool bf16 = cpu != nullptr && cpu->precision() == CpuPrecision::kBf16Activations;
        return std::unique_ptr<MlpBackend>(std::make_unique<LocalMlpBackend>(config, weights, bf16));
    }
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return createCudaMlpBackend(config, weights, ops);
#else
    return core::unsupported("device {}: this build has no CUDA MLP backend (configure with CUDA to run on GPUs)",
                             ops.device().toString());
#endif
}

}  // namespace afd::attention
