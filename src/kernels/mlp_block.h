// The MLP/MoE block of one decoder layer, computed on the CPU from a layer's loaded weights:
//   MoE layer:   router (softmax, top-k, optional renormalisation) over all experts, then the routed experts
//   dense layer: the SwiGLU MLP (packed as expert 0)
// Used by the dense reference on attention ranks and by p2p FFN ranks, which hold the whole block.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/weights.h"

namespace afd::kernels {

// x [T, H] FP32 → out [T, H] FP32. A MoE layer needs its router and all experts loaded (AFD_CHECK).
// bf16_intermediates: the experts' h and y rounded to bf16 as the CUDA kernels store them (MoeParams).
void mlpBlockCpu(const model::ModelConfig& config, const model::MlpLayerWeights& weights, const float* x,
                 int64_t num_tokens, float* out, bool bf16_intermediates = false);

}  // namespace afd::kernels
