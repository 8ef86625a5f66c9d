// FfnCompute on one GPU (Hopper): the rank's weights live in device memory in the kernels' layout, loaded once.
// Each call stages the gathered tokens through pinned host memory (the TCP connector delivers FP32 host rows):
// FP32 → BF16 on the host, copy in, the MoE kernels (moe_cuda.h; the router too for p2p), copy out, BF16 → FP32.
//
// Graph dispatch: token counts are rounded up to buckets (16, then steps of 1/8 of the next power of two); the
// first call of a (layer, bucket) captures the layer's kernels into a CUDA graph, later calls copy in and replay
// it, with the padding rows routed nowhere (expert id -1; p2p pads with zero rows whose outputs are dropped).
// AFD_FFN_CUDA_GRAPHS=0 runs every call eagerly.
//
// Threads: one thread at a time (the FFN worker). Every call makes the rank's GPU current on that thread.
#pragma once

#include <memory>

#include "core/status.h"
#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {

// `max_rows`: the most tokens one call may carry (the FFN rank's peers × afd.max_num_tokens); sizes the staging
// buffers and the kernels' workspace.
core::Result<std::unique_ptr<FfnCompute>> createCudaFfnCompute(const model::ModelConfig& config,
                                                               model::ModelWeights weights, int gpu, int64_t max_rows);

}  // namespace afd::ffn
