// A synthetic Qwen3-MoE checkpoint with the exact HF layout and tensor names, for tests and benchmarks.
//
// Values are uniform with per-tensor scales chosen so activations stay O(1) through the layers (linear weights
// ~ 1/sqrt(fan_in), norms near 1, embeddings O(1)), which keeps logits, routing and greedy choices
// non-degenerate. Every tensor's values depend only on (seed, tensor name), so output is identical whatever the
// sharding, and tensors are produced one at a time (the full-size preset streams to disk).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"
#include "model/safetensors_writer.h"

namespace afd::model {

struct SyntheticOptions {
    uint64_t seed = 0;
    uint64_t max_shard_bytes = 2ull << 30;
};

// The tensors of a checkpoint for `config`, in HF order (embedding, layers, final norm, LM head).
std::vector<TensorPlan> checkpointPlan(const ModelConfig& config);

// What the generator draws for one tensor: centre + U(-1, 1) * half_width per element (synthetic_values.h has the
// formula), from the tensor's name and shape: RMSNorm weights 1 +- 0.2, biases +- 0.1, the embedding +- 1, linear
// weights [out, in] +- sqrt(3 / in) (variance 1 / in).
struct SyntheticDistribution {
    float centre = 0.0f;
    float half_width = 0.0f;
};
SyntheticDistribution syntheticDistribution(std::string_view name, const core::Shape& shape);

// The key of a tensor's random stream (synthetic_values.h): its name hashed with the seed (FNV-1a).
uint64_t syntheticTensorKey(std::string_view name, uint64_t seed);

// Writes config.json, generation_config.json and the safetensors files into `dir`.
core::Status writeSyntheticCheckpoint(const std::string& dir, const ModelConfig& config,
                                      const SyntheticOptions& options);

}  // namespace afd::model
