// Device memory of an engine on a GPU: what it allocates besides the weights and the KV cache, and the KV cache
// budget that --gpu-memory-utilization leaves.
//
// GPU memory (cuda:G): before any weight is allocated, checkDeviceWeightsFit is asked whether the weights, their
// loading, the engine's workspaces (engineWorkspaceBytes) and the smallest KV cache (minimumKvBytes: one sequence of
// max_model_len) fit in the GPU's free memory. Then, unless the KV cache was given (--num-kv-blocks, --kv-cache-mb),
// the engine's KV budget is what gpu_memory_utilization × total memory leaves after the memory in use once the
// weights are loaded (this process's and any other's) and the workspaces, as vLLM's --gpu-memory-utilization; the
// engine allocates at most the blocks max_num_seqs sequences of max_model_len need.
#pragma once

#include <cstdint>

#include "attention/engine.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"

namespace afd::attention {

// Estimated device bytes of what an engine with `options` allocates besides the weights and the KV cache: the model
// runner's workspaces at its limits, the ops' scratch (split-context attention partials, GEMM workspace), the local
// MoE backend's workspace and the decode graphs, with a fixed margin. An over-estimate by design.
uint64_t engineWorkspaceBytes(const model::ModelConfig& config, const EngineOptions& options);

// KV bytes of one token position (every layer, keys and values) in `dtype`, at the head_dim the GPU engine stores
// (CudaOps::storedHeadDim, in a build with the CUDA backend).
uint64_t kvBytesPerToken(const model::ModelConfig& config, core::DType dtype);

struct GpuKvSizing {
    double gpu_memory_utilization = 0.9;  // (0, 1]: the fraction of the GPU's total memory to use
    bool kv_given = false;                // options.num_kv_blocks / kv_cache_bytes were set by the user: keep them
};

// The KV cache the engine will allocate on a GPU at the least (kv_given: what the options ask for; else one
// sequence of max_model_len), for the check before the weights are loaded.
uint64_t minimumKvBytes(const model::ModelConfig& config, const EngineOptions& options, bool kv_given);

// Free and total bytes of cuda:gpu (made current on the calling thread). Errors name the GPU; kInvalidArgument in a
// build without the CUDA backend.
struct GpuMemory {
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
};
core::Result<GpuMemory> gpuMemory(int gpu);

// Sets options.kv_cache_bytes (and leaves num_kv_blocks 0) from what gpu_memory_utilization leaves on cuda:gpu now,
// as above. Errors (kInvalidArgument) name the flags to change when not one max_model_len sequence fits.
core::Status sizeGpuKvCache(const model::ModelConfig& config, int gpu, double gpu_memory_utilization,
                            EngineOptions& options);

}  // namespace afd::attention
