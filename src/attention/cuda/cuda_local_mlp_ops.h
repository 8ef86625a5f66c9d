// LocalMlpOps on a GPU (local_mlp_ops.h): the router and the dense MLP layers of an m2n attention rank through
// CudaMlpKernels on the ops' stream; the router's ids and weights come back to host tensors by DeviceOps copies.
#pragma once

#include <memory>

#include "attention/local_mlp_ops.h"

namespace afd::attention {

// `ops` must be CUDA ops; `weights` (routers, dense MLPs) on their GPU. Errors name what does not fit.
core::Result<std::unique_ptr<LocalMlpOps>> createCudaLocalMlpOps(const model::ModelConfig& config,
                                                                 const model::ModelWeights& weights, DeviceOps& ops);

}  // namespace afd::attention
