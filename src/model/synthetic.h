// A synthetic Qwen3-MoE checkpoint with the exact HF layout and tensor names, for tests and benchmarks.
//
// Values are uniform with per-tensor scales chosen so activations stay O(1) through the layers (linear weights
// ~ 1/sqrt(fan_in), norms near 1, embeddings O(1)), which keeps logits, routing and greedy choices
// non-degenerate. Every tensor's values depend only on (seed, tensor name), so output is identical whatever the
// sharding, and tensors are produced one at a time (the full-size preset streams to disk).
#pragma once

#include <cstdint>
#include <string>
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

// Writes config.json, generation_config.json and the safetensors files into `dir`.
core::Status writeSyntheticCheckpoint(const std::string& dir, const ModelConfig& config,
                                      const SyntheticOptions& options);

}  // namespace afd::model
