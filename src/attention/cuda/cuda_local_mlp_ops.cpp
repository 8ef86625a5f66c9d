#include "attention/cuda/cuda_local_mlp_ops.h"

#include <cuda_runtime.h>

#include "attention/cuda/cuda_mlp_kernels.h"
#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

class CudaLocalMlpOps final : public LocalMlpOps {
public:
    CudaLocalMlpOps(const model::ModelConfig& config, const model::ModelWeights& weights, DeviceOps& ops)
        : config_(config),
          ops_(ops),
          kernels_(config, weights, ops.device().index, static_cast<cudaStream_t>(ops.stream())) {}

    void reserve(int64_t max_tokens) override { kernels_.reserve(max_tokens); }

    void route(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) override {
        const int64_t n = rows(x);
        const int64_t K = config_.num_experts_per_tok;
        AFD_CHECK(ids.dtype() == DType::kI32 && ids.numel() == n * K && weights.dtype() == DType::kF32 &&
                      weights.numel() == n * K,
                  "GPU local MLP ops: router ids [{}, {}] I32 and weights F32, got {} {} and {} {}", n, K,
                  core::dtypeName(ids.dtype()), core::shapeToString(ids.shape()), core::dtypeName(weights.dtype()),
                  core::shapeToString(weights.shape()));
        if (n == 0) return;
        kernels_.reserve(n);
        makeCurrent();
        kernels_.route(layer, static_cast<const core::Bf16*>(x.rawData()), n, nullptr);
        const core::Device device = ops_.device();
        ops_.copy(Tensor::view(const_cast<int32_t*>(kernels_.topkIds()), DType::kI32, {n, K}, device), ids);
        ops_.copy(Tensor::view(const_cast<float*>(kernels_.topkWeights()), DType::kF32, {n, K}, device), weights);
    }

    void denseMlp(int64_t layer, const Tensor& x, const Tensor& out) override {
        const int64_t n = rows(x);
        AFD_CHECK(out.device() == x.device() && out.dtype() == DType::kF32 && out.shape() == x.shape(),
                  "GPU local MLP ops: out {} {} on {} must be FP32 of x's shape", core::dtypeName(out.dtype()),
                  core::shapeToString(out.shape()), out.device().toString());
        if (n == 0) return;
        kernels_.reserve(n);
        makeCurrent();
        kernels_.dense(layer, static_cast<const core::Bf16*>(x.rawData()), n, static_cast<float*>(out.rawData()));
    }

private:
    int64_t rows(const Tensor& x) const {
        AFD_CHECK(x.device() == ops_.device() && x.dtype() == DType::kBf16 && x.dim() == 2 &&
                      x.size(1) == config_.hidden_size,
                  "GPU local MLP ops: x must be [n, {}] BF16 on {}, got {} {} on {}", config_.hidden_size,
                  ops_.device().toString(), core::dtypeName(x.dtype()), core::shapeToString(x.shape()),
                  x.device().toString());
        return x.size(0);
    }
    void makeCurrent() const { AFD_CUDA_CHECK(cudaSetDevice(ops_.device().index)); }

    const model::ModelConfig& config_;
    DeviceOps& ops_;
    CudaMlpKernels kernels_;
};

}  // namespace

core::Result<std::unique_ptr<LocalMlpOps>> createCudaLocalMlpOps(const model::ModelConfig& config,
                                                                 const model::ModelWeights& weights, DeviceOps& ops) {
    if (ops.device().isCpu()) return core::invalidArgument("GPU local MLP ops need CUDA ops, got the host");
    try {
        return std::unique_ptr<LocalMlpOps>(std::make_unique<CudaLocalMlpOps>(config, weights, ops));
    } catch (const core::Error& e) {
        return core::invalidArgument("the attention rank's MLP work on {}: {}", ops.device().toString(), e.what());
    }
}

}  // namespace afd::attention
