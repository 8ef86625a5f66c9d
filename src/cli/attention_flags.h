// The flags of a subcommand that runs an attention rank (`afd generate`, `afd serve`): the model, the device, the
// engine's limits and the AFD config, as a user passes them, and their resolution into what
// attention::AttentionRank::create takes. Flag parsing stays here; the rank's assembly is attention/attention_rank.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attention/attention_rank.h"
#include "attention/engine.h"
#include "attention/model_source.h"
#include "cli/device_flags.h"
#include "cli/model_source.h"
#include "core/status.h"

namespace CLI {
class App;
}

namespace afd::cli {

struct AttentionFlags {
    ModelFlags model;
    DeviceChoice device;
    std::string dtype = "auto";  // auto | float32 | bfloat16 (the dense engine's activations on the CPU)
    double gpu_memory_utilization = 0.9;
    bool kv_cache_mb_given = false;
    std::optional<int64_t> max_num_batched_tokens;
    std::optional<std::string> additional_config;
    std::optional<std::string> afd_config_file;
    int attention_rank = 0;
    attention::EngineOptions engine;  // max_model_len 0: from the model config

    AttentionFlags() { engine.scheduler.max_model_len = 0; }
    bool kvGiven() const { return kv_cache_mb_given || engine.num_kv_blocks > 0; }
    bool afdGiven() const { return additional_config.has_value() || afd_config_file.has_value(); }
};

// The flags, in three groups (a subcommand adds its own between them): the model (with `seed_flag` for random
// weights), the device and its memory (--device, --device-ids, --dtype, --enforce-eager, --cuda-graph-max-batch-size,
// --gpu-memory-utilization); the engine's limits (--max-num-seqs, --max-num-batched-tokens, --max-model-len,
// --block-size, --num-kv-blocks, --kv-cache-mb, --dbo); the AFD config (--additional-config, --afd-config,
// --attention-rank). `flags` must outlive the parse (the subcommand's callback owns it).
void addAttentionModelAndDeviceFlags(CLI::App& cmd, AttentionFlags& flags, const std::string& seed_flag);
void addEngineLimitFlags(CLI::App& cmd, AttentionFlags& flags);
void addAfdFlags(CLI::App& cmd, AttentionFlags& flags);

struct AttentionSetup {
    attention::ModelSource source;
    attention::AttentionRankOptions options;
};

// Resolves the flags in the order a user's mistake is best reported: the AFD config, --attention-rank, random weights
// under AFD, the device (before any file is read), the model, the engine options, --dtype. Errors name the flag or
// key: kInvalidArgument for flags and configs (exit code 2), the model's own otherwise (exitCodeFor).
core::Result<AttentionSetup> resolveAttentionFlags(const AttentionFlags& flags);

}  // namespace afd::cli
