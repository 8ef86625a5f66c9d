// The MLP work an m2n attention rank does itself (DESIGN.md §2): the router of every MoE layer, whose ids and weights
// go to the FFN ranks with the hidden states, and the dense MLP layers (mlp_only_layers, decoder_sparse_step), on the
// ops' device. Chosen by device (createLocalMlpOps), so that RemoteMlpBackend has one code path for every device.
// Engine thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "attention/device_ops.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class LocalMlpOps {
public:
    virtual ~LocalMlpOps() = default;

    // Sizes device buffers for calls of up to `max_tokens` rows (the host needs none). Calls of more rows grow them.
    virtual void reserve(int64_t max_tokens) = 0;
    // The router of MoE layer `layer` over x [n, H] (the ops' device and activation dtype) into ids [n, K] I32 and
    // weights [n, K] F32 (host tensors, pinned through DeviceOps::emptyHost on a GPU): model-global expert ids in
    // descending weight order. Enqueued on the ops' stream: they hold the result once it has passed
    // (DeviceOps::synchronize).
    virtual void route(int64_t layer, const core::Tensor& x, const core::Tensor& ids, const core::Tensor& weights) = 0;
    // out [n, H] FP32 = the SwiGLU MLP of dense layer `layer` on x [n, H] (activation dtype), both on the ops'
    // device; enqueued on the ops' stream.
    virtual void denseMlp(int64_t layer, const core::Tensor& x, const core::Tensor& out) = 0;
};

// The host: the reference kernels (routerForwardCpu, mlpBlockCpu) on FP32 host tensors (BF16 ones are converted).
// A GPU: the CUDA router and grouped GEMMs (attention/cuda/cuda_local_mlp_ops.h). `weights` hold the routers of the
// MoE layers and the dense MLPs on the ops' device; they, `config` and `ops` outlive the result.
core::Result<std::unique_ptr<LocalMlpOps>> createLocalMlpOps(const model::ModelConfig& config,
                                                             const model::ModelWeights& weights, DeviceOps& ops);

}  // namespace afd::attention
