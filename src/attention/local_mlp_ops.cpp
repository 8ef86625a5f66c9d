#include "attention/local_mlp_ops.h"

#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "kernels/mlp_block.h"
#include "kernels/router.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "attention/cuda/cuda_local_mlp_ops.h"
#endif

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

void expectHostRows(const Tensor& t, DType dtype, int64_t rows, int64_t cols, const char* what) {
    AFD_CHECK(t.device().isCpu() && t.dtype() == dtype && t.numel() == rows * cols,
              "local MLP ops: {} must be {} host rows [{}, {}], got {} {} on {}", what, core::dtypeName(dtype), rows,
              cols, core::dtypeName(t.dtype()), core::shapeToString(t.shape()), t.device().toString());
}

class CpuLocalMlpOps final : public LocalMlpOps {
public:
    CpuLocalMlpOps(const model::ModelConfig& config, const model::ModelWeights& weights)
        : config_(config), weights_(weights) {}

    void reserve(int64_t) override {}

    void route(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) override {
        const int64_t n = rows(x);
        const int64_t K = config_.num_experts_per_tok;
        expectHostRows(ids, DType::kI32, n, K, "router ids");
        expectHostRows(weights, DType::kF32, n, K, "router weights");
        if (n == 0) return;
        const model::MlpLayerWeights& w = weights_.mlp[static_cast<size_t>(layer)];
        AFD_CHECK(w.router.rawData() != nullptr, "local MLP ops: layer {} has no router", layer);
        const auto act = x.dtype() == DType::kF32 ? kernels::ActDType::kF32 : kernels::ActDType::kBf16;
        kernels::routerForwardCpu(kernels::routerParams(config_, n, act, x.rawData(), w.router.data<core::Bf16>(),
                                                        ids.data<int32_t>(), weights.data<float>()));
    }

    void denseMlp(int64_t layer, const Tensor& x, const Tensor& out) override {
        const int64_t n = rows(x);
        const int64_t H = config_.hidden_size;
        AFD_CHECK(out.device().isCpu() && out.dtype() == DType::kF32 && out.shape() == x.shape(),
                  "local MLP ops: out {} {} must be FP32 of x's shape", core::dtypeName(out.dtype()),
                  core::shapeToString(out.shape()));
        const model::MlpLayerWeights& w = weights_.mlp[static_cast<size_t>(layer)];
        if (x.dtype() == DType::kF32) {
            kernels::mlpBlockCpu(config_, w, x.data<float>(), n, out.data<float>());
            return;
        }
        // BF16 host activations: read through FP32.
        x_.resize(static_cast<size_t>(n * H));
        const core::Bf16* in = x.data<core::Bf16>();
        for (size_t i = 0; i < x_.size(); ++i) x_[i] = in[i].toFloat();
        kernels::mlpBlockCpu(config_, w, x_.data(), n, out.data<float>());
    }

private:
    int64_t rows(const Tensor& x) const {
        AFD_CHECK(x.device().isCpu() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBf16) && x.dim() == 2 &&
                      x.size(1) == config_.hidden_size,
                  "local MLP ops on the host: x must be [n, {}] F32 or BF16 host rows, got {} {} on {}",
                  config_.hidden_size, core::dtypeName(x.dtype()), core::shapeToString(x.shape()),
                  x.device().toString());
        return x.size(0);
    }

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    std::vector<float> x_;
};

}  // namespace

core::Result<std::unique_ptr<LocalMlpOps>> createLocalMlpOps(const model::ModelConfig& config,
                                                             const model::ModelWeights& weights, DeviceOps& ops) {
    if (ops.device().isCpu()) return std::unique_ptr<LocalMlpOps>(std::make_unique<CpuLocalMlpOps>(config, weights));
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return createCudaLocalMlpOps(config, weights, ops);
#else
    return core::unsupported("device {}: this build has no CUDA attention backend (configure with CUDA to run on GPUs)",
                             ops.device().toString());
#endif
}

}  // namespace afd::attention
