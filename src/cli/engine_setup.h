// Building an engine on a device from a ModelSource: the weights where the engine's ops run (host weights from the
// checkpoint on the CPU; on a GPU uploaded from it or drawn there), the KV cache sized from the GPU memory left, and
// the dense engine (every layer in this process: the reference AFD must match) as one object.
//
// GPU memory (cuda:G): before any weight is allocated, checkDeviceWeightsFit is asked whether the weights, their
// loading, the engine's workspaces (engineWorkspaceBytes) and the smallest KV cache (one sequence of max_model_len) fit
// in the GPU's free memory. Then, unless the KV cache was given (--num-kv-blocks, --kv-cache-mb), the engine's KV
// budget is what gpu_memory_utilization × total memory leaves after the memory in use once the weights are loaded
// (this process's and any other's) and the workspaces, as vLLM's --gpu-memory-utilization; the engine allocates at
// most the blocks max_num_seqs sequences of max_model_len need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "attention/cpu_ops.h"
#include "attention/device_ops.h"
#include "attention/engine.h"
#include "attention/mlp_backend.h"
#include "cli/model_source.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::cli {

// Estimated device bytes of what an engine with `options` allocates besides the weights and the KV cache: the model
// runner's workspaces at its limits, the ops' scratch (split-context attention partials, GEMM workspace), the local
// MoE backend's workspace and the decode graphs, with a fixed margin. An over-estimate by design.
uint64_t engineWorkspaceBytes(const model::ModelConfig& config, const attention::EngineOptions& options);

// KV bytes of one token position (every layer, keys and values) in `dtype`.
uint64_t kvBytesPerToken(const model::ModelConfig& config, core::DType dtype);

struct GpuKvSizing {
    double gpu_memory_utilization = 0.9;  // (0, 1]: the fraction of the GPU's total memory to use
    bool kv_given = false;                // options.num_kv_blocks / kv_cache_bytes were set by the user: keep them
};

// The KV cache the engine will allocate on cuda:gpu at the least (kv_given: what the options ask for; else one
// sequence of max_model_len), for the check before the weights are loaded.
uint64_t minimumKvBytes(const model::ModelConfig& config, const attention::EngineOptions& options, bool kv_given);

// Sets options.kv_cache_bytes (and leaves num_kv_blocks 0) from what gpu_memory_utilization leaves on cuda:gpu now,
// as above. Errors (kInvalidArgument) name the flags to change when not one max_model_len sequence fits.
core::Status sizeGpuKvCache(const model::ModelConfig& config, int gpu, double gpu_memory_utilization,
                            attention::EngineOptions& options);

// kInvalidArgument naming --random-weights when the source's weights cannot be made on `device` (random weights are
// drawn on a GPU only).
core::Status checkWeightsDevice(const ModelSource& source, core::Device device);

// The weights of `selection` for ops on `device`: on the CPU the host weights loaded from the checkpoint (random
// weights are refused there, naming --random-weights); on cuda:G uploaded from the checkpoint (the host copy freed on
// return) or drawn from the source's seed, after checkDeviceWeightsFit with `other_device_bytes` beside them. Logs
// the bytes and the rates (checkpoint read and packed; uploaded).
core::Result<model::ModelWeights> weightsForDevice(const ModelSource& source, const model::WeightSelection& selection,
                                                   core::Device device, uint64_t other_device_bytes);

// A backend the engine uses in place of the local one (a benchmark's probe around it); gets the local backend and
// what it was built from, all alive as long as the engine.
using BackendWrapper = std::function<core::Result<std::unique_ptr<attention::MlpBackend>>(
    std::unique_ptr<attention::MlpBackend> inner, const model::ModelConfig& config, const model::ModelWeights& weights,
    attention::DeviceOps& ops)>;

struct DenseEngineOptions {
    core::Device device = core::Device::cpu();
    // The host engine's precision (--dtype): FP32, or rounded to bf16 where the GPU engine stores bf16.
    attention::CpuPrecision cpu_precision = attention::CpuPrecision::kFp32;
    attention::EngineOptions engine;  // kv_cache_bytes is replaced on a GPU unless gpu.kv_given
    GpuKvSizing gpu;
    BackendWrapper wrap_backend;  // optional
};

// The dense engine and everything it references (config, checkpoint mappings, ops, weights, MLP backend), torn down in
// the right order. Single-threaded, as the engine.
class DenseEngine {
public:
    // Takes the source (config and checkpoint); errors name the device and the flag at fault (exit codes through
    // exitCodeFor: memory that does not fit is kInvalidArgument).
    static core::Result<std::unique_ptr<DenseEngine>> create(ModelSource source, const DenseEngineOptions& options);
    ~DenseEngine();
    DenseEngine(const DenseEngine&) = delete;
    DenseEngine& operator=(const DenseEngine&) = delete;

    attention::Engine& engine() { return *engine_; }
    const model::ModelConfig& config() const { return source_.config; }
    attention::DeviceOps& ops() { return *ops_; }
    const model::ModelWeights& weights() const { return weights_; }
    attention::MlpBackend& backend() { return *backend_; }

private:
    DenseEngine() = default;

    ModelSource source_;
    std::unique_ptr<attention::DeviceOps> ops_;
    model::ModelWeights weights_;
    std::unique_ptr<attention::MlpBackend> backend_;
    std::unique_ptr<attention::Engine> engine_;
};

}  // namespace afd::cli
