// FfnCompute on one GPU (Hopper): the rank's weights live in device memory in the kernels' layout, loaded once.
// Each call stages the gathered tokens through pinned host memory (the TCP connector delivers FP32 host rows):
// FP32 → BF16 on the host, copy in, the MoE kernels (moe_cuda.h; the router too for p2p), copy out the FP32 sums
// (MoeParams::out_f32: never rounded to bf16, so an m2n attention rank adds partial sums as one rank's whole sum).
//
// Graph dispatch: token counts are rounded up to buckets (16, then steps of 1/8 of the next power of two); one CUDA
// graph per (layer, bucket) of the layer's kernels is captured at start-up, and each call copies in and replays it,
// with the padding rows routed nowhere (expert id -1; p2p pads with zero rows whose outputs are dropped).
// AFD_FFN_CUDA_GRAPHS=0 runs every call eagerly.
//
// p2p routing counts (routedTokenTotals): after each MoE layer it routes, a small kernel in the same graph adds the
// call's entries per expert to 64-bit totals in device memory, reading the call's real row count from the device (the
// bucket's padding rows are left out); no host synchronisation per call. m2n computes keep no totals.
//
// Threads: one thread at a time (the FFN worker), except routedTokenTotals: any thread, while calls run (it reads
// through a stream of its own). Every call makes the rank's GPU current on that thread.
#pragma once

#include <memory>

#include "core/status.h"
#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {

// `max_rows`: the most tokens one call may carry (the FFN rank's peers × afd.max_num_tokens); sizes the staging
// buffers and the kernels' workspace. `num_device_lanes`: 0 for a rank fed through host memory (tcp); 1 or 2 (one
// per dual-batch stage) for one fed by a device connector, whose computeDevice calls then count the m2n frames' local
// ids per expert too (routedTokenTotals over this rank's experts). `enforce_eager`: no per-layer graphs (as
// AFD_FFN_CUDA_GRAPHS=0).
core::Result<std::unique_ptr<FfnCompute>> createCudaFfnCompute(const model::ModelConfig& config,
                                                               model::ModelWeights weights, int gpu, int64_t max_rows,
                                                               int num_device_lanes = 0, bool enforce_eager = false);

// As createCudaFfnCompute, with the weights `afd gen-model --seed seed` writes for `selection` drawn on the GPU
// (kernels/device_random.h: no checkpoint is read).
core::Result<std::unique_ptr<FfnCompute>> createRandomCudaFfnCompute(const model::ModelConfig& config,
                                                                     const model::WeightSelection& selection,
                                                                     uint64_t seed, int gpu, int64_t max_rows,
                                                                     int num_device_lanes = 0,
                                                                     bool enforce_eager = false);

// The device memory createCudaFfnCompute allocates for the MLP weights `selection` picks (packed experts, routers run
// on the GPU, the largest layer's upload staging) and for calls of up to `max_rows` rows (activations, the kernels'
// workspaces), from the config alone: known before any weight is read.
uint64_t cudaFfnDeviceBytes(const model::ModelConfig& config, const model::WeightSelection& selection,
                            int64_t max_rows);

// Whether `gpu`'s free memory holds cudaFfnDeviceBytes plus kCudaFfnHeadroomBytes (CUDA graphs, library handles):
// invalidArgument naming the GPU, the bytes needed and free, and the remedy, when it does not. Ranks that share a GPU
// each check the memory free when they load.
inline constexpr uint64_t kCudaFfnHeadroomBytes = uint64_t{256} << 20;
core::Status checkCudaFfnFits(const model::ModelConfig& config, const model::WeightSelection& selection, int gpu,
                              int64_t max_rows);

}  // namespace afd::ffn
