#include "lab/cli/routing_probe.h"

#if defined(AFD_HAVE_CUDA_ATTENTION)

#include <cuda_runtime.h>

#include <algorithm>
#include <span>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/moe_cuda.h"
#include "kernels/router.h"
#include "lab/decode_floor.h"

namespace afd::lab {

RoutingProbe::RoutingProbe(std::unique_ptr<attention::MlpBackend> inner, const model::ModelConfig& config,
                           const model::ModelWeights& weights, attention::DeviceOps& ops, int64_t max_rows)
    : inner_(std::move(inner)), config_(config), weights_(weights), ops_(ops), max_rows_(max_rows) {
    AFD_CHECK(max_rows >= 1, "RoutingProbe: max_rows {} must be >= 1", max_rows);
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        moe_index_.push_back(config.isMoeLayer(l) ? moe_layers++ : -1);
    }
    recorded_.assign(static_cast<size_t>(moe_layers), 0);
    router_supported_ = config.num_experts % 32 == 0 && config.num_experts <= 256 && config.hidden_size % 16 == 0 &&
                        config.num_experts_per_tok <= 32;
    // A p2p attention rank holds no routers (its FFN peer routes): nothing to probe.
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        if (config.isMoeLayer(l) && weights.mlp[static_cast<size_t>(l)].router.rawData() == nullptr) {
            router_supported_ = false;
        }
    }
    if (moe_layers == 0 || !router_supported_) return;
    const auto K = static_cast<size_t>(config.num_experts_per_tok);
    const auto rows = static_cast<size_t>(max_rows);
    AFD_CUDA_CHECK(cudaSetDevice(ops.device().index));
    ids_ = kernels::cuda::DeviceBuffer(rows * K * sizeof(int32_t));
    topk_weights_ = kernels::cuda::DeviceBuffer(rows * K * sizeof(float));
    workspace_ = kernels::cuda::DeviceBuffer(
        std::max<size_t>(kernels::routerCudaWorkspaceBytes(max_rows, config.hidden_size, config.num_experts), 256));
    host_ids_ = kernels::cuda::PinnedBuffer(static_cast<size_t>(moe_layers) * rows * K * sizeof(int32_t));
}

core::Status RoutingProbe::beginStep(const attention::StepPlan& plan) {
    ++steps_seen_;
    last_step_tokens_ = 0;
    for (const int64_t t : plan.stage_tokens) last_step_tokens_ += t;
    return inner_->beginStep(plan);
}

core::Status RoutingProbe::submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) {
    const int64_t moe = moe_index_.at(static_cast<size_t>(layer));
    // The armed step's first armed_rows_ rows of each MoE layer, over its stages in order (a two-stage step submits
    // stage 0's rows, then stage 1's).
    const int64_t done = moe >= 0 ? recorded_[static_cast<size_t>(moe)] : 0;
    const int64_t rows = std::min<int64_t>(x.size(0), armed_rows_ - done);
    if (armed_rows_ > 0 && moe >= 0 && rows > 0 && router_supported_) {
        const int64_t K = config_.num_experts_per_tok;
        const auto& router = weights_.mlp[static_cast<size_t>(layer)].router;
        kernels::routerForwardCuda(
            kernels::routerParams(config_, rows, kernels::ActDType::kBf16, x.rawData(), router.data<core::Bf16>(),
                                  ids_.as<int32_t>(), topk_weights_.as<float>()),
            workspace_.get(), workspace_.bytes(), ops_.stream());
        int32_t* dst = host_ids_.as<int32_t>() + (moe * max_rows_ + done) * K;
        // Stream-ordered behind the router: the next stage's router call on the stream writes ids_ after this copy.
        AFD_CUDA_CHECK(cudaMemcpyAsync(dst, ids_.get(), static_cast<size_t>(rows * K) * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(ops_.stream())));
        recorded_[static_cast<size_t>(moe)] = done + rows;
    }
    return inner_->submit(layer, stage, x, out);
}

void RoutingProbe::arm(int64_t rows) {
    AFD_CHECK(rows >= 1 && rows <= max_rows_, "RoutingProbe: {} rows asked for, at most {}", rows, max_rows_);
    armed_rows_ = rows;
    std::fill(recorded_.begin(), recorded_.end(), 0);
}

std::vector<double> RoutingProbe::routedExperts() {
    const int64_t rows = armed_rows_;
    armed_rows_ = 0;
    ops_.synchronize();
    std::vector<double> distinct;
    const int64_t K = config_.num_experts_per_tok;
    for (size_t m = 0; m < recorded_.size(); ++m) {
        if (recorded_[m] < rows) return {};  // the armed step had fewer rows than asked for
        const int32_t* ids = host_ids_.as<int32_t>() + static_cast<int64_t>(m) * max_rows_ * K;
        distinct.push_back(static_cast<double>(
            countDistinctExperts(std::span<const int32_t>(ids, static_cast<size_t>(rows * K)), config_.num_experts)));
    }
    return distinct;
}

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA_ATTENTION
