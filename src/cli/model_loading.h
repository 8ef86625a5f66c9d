// Shared by subcommands: open a model directory (config.json + safetensors) with errors a user can act on.
#pragma once

#include <string>

#include "core/exit_codes.h"
#include "core/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace afd::cli {

struct OpenedModel {
    model::ModelConfig config;
    model::Checkpoint checkpoint;
};

// Errors: kInvalidArgument for a directory that does not exist and for any config.json problem (absent, not JSON, a
// field of the wrong type or value: exit code 2); the checkpoint's own (kNotFound, kCorrupt …: exit code 1).
core::Result<OpenedModel> openModel(const std::string& dir);

// ModelConfig::fromFile(path) with its errors as kInvalidArgument (bad input: exit code 2), kInternal kept.
core::Result<model::ModelConfig> readModelConfig(const std::string& path);

// The exit code table (core/exit_codes.h).
using core::exitCodeFor;

}  // namespace afd::cli
