#include "attention/cuda/cuda_mlp_kernels.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/dense_cuda.h"
#include "kernels/moe_cuda.h"
#include "kernels/router.h"

namespace afd::attention {
namespace {

void expectOnGpu(const core::Tensor& t, int gpu, int64_t layer, const char* what) {
    AFD_CHECK(t.rawData() != nullptr && t.dtype() == core::DType::kBf16, "CUDA MLP: layer {} has no BF16 {}", layer,
              what);
    AFD_CHECK(t.device() == core::Device::cuda(gpu), "CUDA MLP: layer {} {} is on {}, the kernels on cuda:{}", layer,
              what, t.device().toString(), gpu);
}

}  // namespace

CudaMlpKernels::CudaMlpKernels(const model::ModelConfig& config, const model::ModelWeights& weights, int gpu,
                               cudaStream_t stream)
    : config_(config),
      weights_(weights),
      gpu_(gpu),
      stream_(stream),
      shared_sms_(kernels::cuda::sharedThroughMps(gpu)) {
    AFD_CHECK(static_cast<int64_t>(weights.mlp.size()) == config.num_hidden_layers,
              "CUDA MLP: {} MLP layers for {} layers", weights.mlp.size(), config.num_hidden_layers);
    const int64_t H = config.hidden_size;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const model::MlpLayerWeights& w = weights.mlp[static_cast<size_t>(l)];
        const bool moe = config.isMoeLayer(l);
        AFD_CHECK(w.is_moe == moe, "CUDA MLP: layer {} weights are {} for a {} layer", l, w.is_moe ? "MoE" : "dense",
                  moe ? "MoE" : "dense");
        if (moe && w.router.rawData() != nullptr) {
            expectOnGpu(w.router, gpu, l, "router");
            AFD_CHECK(w.router.shape() == (core::Shape{config.num_experts, H}), "CUDA MLP: layer {} router is {}", l,
                      core::shapeToString(w.router.shape()));
            routes_ = true;
            max_top_k_ = std::max(max_top_k_, config.num_experts_per_tok);
        }
        if (!w.hasExperts()) continue;
        expectOnGpu(w.w13, gpu, l, "w13");
        expectOnGpu(w.w2, gpu, l, "w2");
        AFD_CHECK(moe || w.expert_end - w.expert_begin == 1, "CUDA MLP: dense layer {} holds {} experts", l,
                  w.expert_end - w.expert_begin);
        max_experts_ = std::max(max_experts_, w.expert_end - w.expert_begin);
        max_inter_ = std::max(max_inter_, w.inter);
        if (moe) max_top_k_ = std::max(max_top_k_, config.num_experts_per_tok);
    }
}

void CudaMlpKernels::reserve(int64_t max_tokens) {
    if (max_tokens <= capacity_) return;
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream_));  // calls in flight may use the buffers replaced here
    const int64_t T = max_tokens;
    const int64_t H = config_.hidden_size;
    const auto entries = static_cast<size_t>(T * max_top_k_);
    topk_ids_ = kernels::cuda::DeviceBuffer(entries * sizeof(int32_t));
    topk_weights_ = kernels::cuda::DeviceBuffer(entries * sizeof(float));
    size_t moe_bytes = 0;
    bool dense_layers = false;
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
        const model::MlpLayerWeights& w = weights_.mlp[static_cast<size_t>(l)];
        if (!w.hasExperts()) continue;
        const bool moe = config_.isMoeLayer(l);
        dense_layers = dense_layers || !moe;
        moe_bytes = std::max(moe_bytes, kernels::moeCudaWorkspaceBytes(T, moe ? config_.num_experts_per_tok : 1,
                                                                       w.expert_end - w.expert_begin, H, w.inter));
    }
    moe_workspace_ = kernels::cuda::DeviceBuffer(moe_bytes);
    if (routes_)
        router_workspace_ = kernels::cuda::DeviceBuffer(kernels::routerCudaWorkspaceBytes(T, H, config_.num_experts));
    if (dense_layers) {
        // The constant routing of a dense layer: every token to expert 0 with weight 1.
        const std::vector<int32_t> zeros(static_cast<size_t>(T), 0);
        const std::vector<float> ones(static_cast<size_t>(T), 1.0f);
        dense_ids_ = kernels::cuda::DeviceBuffer(zeros.size() * sizeof(int32_t));
        dense_weights_ = kernels::cuda::DeviceBuffer(ones.size() * sizeof(float));
        AFD_CUDA_CHECK(
            cudaMemcpyAsync(dense_ids_.get(), zeros.data(), dense_ids_.bytes(), cudaMemcpyHostToDevice, stream_));
        AFD_CUDA_CHECK(cudaMemcpyAsync(dense_weights_.get(), ones.data(), dense_weights_.bytes(),
                                       cudaMemcpyHostToDevice, stream_));
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vectors go out of scope
    }
    capacity_ = T;
}

const model::MlpLayerWeights& CudaMlpKernels::layerWeights(int64_t layer) const {
    AFD_CHECK(layer >= 0 && layer < config_.num_hidden_layers, "CUDA MLP: layer {} of {}", layer,
              config_.num_hidden_layers);
    return weights_.mlp[static_cast<size_t>(layer)];
}

void CudaMlpKernels::checkCall(int64_t n) const {
    AFD_CHECK(n >= 0 && n <= capacity_, "CUDA MLP: a call of {} rows, buffers reserved for {}", n, capacity_);
}

void CudaMlpKernels::route(int64_t layer, const core::Bf16* x, int64_t n, const int32_t* num_valid) {
    const model::MlpLayerWeights& w = layerWeights(layer);
    AFD_CHECK(config_.isMoeLayer(layer) && w.router.rawData() != nullptr, "CUDA MLP: layer {} has no router", layer);
    checkCall(n);
    if (n == 0) return;
    int32_t* ids = topk_ids_.as<int32_t>();
    float* weights = topk_weights_.as<float>();
    const kernels::RouterParams r =
        kernels::routerParams(config_, n, kernels::ActDType::kBf16, x, w.router.data<core::Bf16>(), ids, weights);
    kernels::routerForwardCuda(r, router_workspace_.get(), router_workspace_.bytes(), stream_);
    if (num_valid != nullptr) {
        kernels::maskPaddedRowsCuda({n, config_.num_experts_per_tok, num_valid, ids, weights}, stream_);
    }
}

void CudaMlpKernels::experts(int64_t layer, const core::Bf16* x, int64_t n, float* out) {
    const model::MlpLayerWeights& w = layerWeights(layer);
    AFD_CHECK(config_.isMoeLayer(layer) && w.hasExperts(), "CUDA MLP: layer {} holds no experts here", layer);
    checkCall(n);
    if (n == 0) return;
    kernels::MoeParams p;
    p.num_tokens = n;
    p.hidden = config_.hidden_size;
    p.inter = w.inter;
    p.num_experts = w.expert_end - w.expert_begin;
    p.top_k = config_.num_experts_per_tok;
    p.routed_experts = config_.num_experts;
    p.act_dtype = kernels::ActDType::kBf16;
    p.x = x;
    p.topk_ids = topk_ids_.as<int32_t>();
    p.topk_weights = topk_weights_.as<float>();
    p.w13 = w.w13.data<core::Bf16>();
    p.w2 = w.w2.data<core::Bf16>();
    p.out = out;
    p.out_f32 = true;
    p.shared_sms = shared_sms_;
    kernels::moeForwardCuda(p, moe_workspace_.get(), moe_workspace_.bytes(), stream_);
}

void CudaMlpKernels::dense(int64_t layer, const core::Bf16* x, int64_t n, float* out) {
    const model::MlpLayerWeights& w = layerWeights(layer);
    AFD_CHECK(!config_.isMoeLayer(layer) && w.hasExperts(), "CUDA MLP: layer {} has no dense MLP here", layer);
    checkCall(n);
    if (n == 0) return;
    kernels::MoeParams p;
    p.num_tokens = n;
    p.hidden = config_.hidden_size;
    p.inter = w.inter;
    p.num_experts = 1;
    p.top_k = 1;
    p.act_dtype = kernels::ActDType::kBf16;
    p.x = x;
    p.topk_ids = dense_ids_.as<int32_t>();
    p.topk_weights = dense_weights_.as<float>();
    p.w13 = w.w13.data<core::Bf16>();
    p.w2 = w.w2.data<core::Bf16>();
    p.out = out;
    p.out_f32 = true;
    p.shared_sms = shared_sms_;
    kernels::moeForwardCuda(p, moe_workspace_.get(), moe_workspace_.bytes(), stream_);
}

}  // namespace afd::attention
