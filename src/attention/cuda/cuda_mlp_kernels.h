// The MLP blocks' kernels on one GPU over device weights (device_weights.h): the router of a MoE layer
// (kernels::routerForwardCuda), its routed experts (kernels::moeForwardCuda, BF16 out), and a dense SwiGLU MLP layer as
// the same grouped GEMMs with one expert (top-k 1, ids 0, weights 1 from constant buffers). Shared by the CUDA MLP
// backend (the dense engine) and the GPU attention rank's own MLP work (m2n: the router and the dense layers).
//
// Buffers (routing, workspaces, the constant dense routing) are allocated by reserve() and keep their addresses, so
// the calls can be captured in a CUDA graph and replayed. Every call only enqueues on the stream given at
// construction (no allocation, no synchronisation) and takes device pointers on the object's GPU, which must be
// current. Engine thread only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class CudaMlpKernels {
public:
    // `weights` (on cuda:gpu, each MoE layer with its router; experts where the caller runs them) and `config` outlive
    // the object. Checks the weights' shapes and device (core::Error naming the layer).
    CudaMlpKernels(const model::ModelConfig& config, const model::ModelWeights& weights, int gpu, cudaStream_t stream);

    // Sizes every buffer for calls of up to `max_tokens` rows. Growing waits for the stream and reallocates (not
    // inside a capture); a smaller count does nothing.
    void reserve(int64_t max_tokens);
    int64_t capacity() const { return capacity_; }

    // The router of MoE layer `layer` over x [n, H] BF16 into topkIds() / topkWeights() [n, K] (model-global ids in
    // descending weight order). With `num_valid` ([1] on the device), rows >= *num_valid get ids -1 and weights 0.
    void route(int64_t layer, const core::Bf16* x, int64_t n, const int32_t* num_valid);
    // out [n, H] BF16 = the routed experts of MoE layer `layer` on x, weighted by the last route()'s entries.
    void experts(int64_t layer, const core::Bf16* x, int64_t n, float* out);
    // out [n, H] BF16 = the SwiGLU MLP of dense layer `layer` on x.
    void dense(int64_t layer, const core::Bf16* x, int64_t n, float* out);

    const int32_t* topkIds() const { return topk_ids_.as<int32_t>(); }  // [capacity, K]
    const float* topkWeights() const { return topk_weights_.as<float>(); }

private:
    const model::MlpLayerWeights& layerWeights(int64_t layer) const;
    void checkCall(int64_t n) const;

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    const int gpu_;
    const cudaStream_t stream_;
    int64_t capacity_ = 0;
    bool routes_ = false;  // some MoE layer has a router
    int64_t max_experts_ = 1;
    int64_t max_inter_ = 1;
    int64_t max_top_k_ = 1;
    bool shared_sms_ = false;                    // an MPS client (kernels::MoeParams::shared_sms)
    kernels::cuda::DeviceBuffer topk_ids_;       // [capacity, K] I32
    kernels::cuda::DeviceBuffer topk_weights_;   // [capacity, K] F32
    kernels::cuda::DeviceBuffer dense_ids_;      // [capacity] I32, all 0
    kernels::cuda::DeviceBuffer dense_weights_;  // [capacity] F32, all 1
    kernels::cuda::DeviceBuffer router_workspace_;
    kernels::cuda::DeviceBuffer moe_workspace_;
};

}  // namespace afd::attention
