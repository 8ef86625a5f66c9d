// Where a subcommand's model comes from, as a user names it: a checkpoint directory (`--model DIR`), or, with
// `--random-weights`, only a shape — DIR/config.json (the directory needs no safetensors), `--config FILE` or
// `--preset NAME` (as `afd gen-model` takes them) — whose weights are drawn on the GPU (attention/cuda/
// device_weights.h, randomModelWeights: the values `afd gen-model --seed S` writes for the same config).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attention/model_source.h"
#include "core/status.h"

namespace CLI {
class App;
}

namespace afd::cli {

struct ModelFlags {
    std::string model_dir;    // --model
    std::string config_file;  // --config
    std::string preset;       // --preset
    int64_t layers = 0;       // --layers: override num_hidden_layers (random weights only); 0 = the config's
    bool random_weights = false;
    uint64_t weights_seed = 0;
};

// Adds --model, --config, --preset, --layers, --random-weights and `seed_flag` (the weights' seed) to `cmd`.
void addModelFlags(CLI::App& cmd, ModelFlags& flags, const std::string& seed_flag);

// The model a subcommand runs (attention/model_source.h): config, checkpoint, name, random weights and their seed.
using ModelSource = attention::ModelSource;

// Errors: kInvalidArgument for a rule the flags break (exactly one of --model, --config, --preset; --config, --preset
// and --layers only with --random-weights), config.json problems as ModelConfig reports them, and the checkpoint's
// (kNotFound, kCorrupt …) for --model without --random-weights. A subcommand with a default model passes its preset
// as `default_preset` (used when none of the three is given).
core::Result<ModelSource> openModelSource(const ModelFlags& flags, const std::string& default_preset = "");

}  // namespace afd::cli
