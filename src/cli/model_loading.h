// Shared by subcommands: open a model directory (config.json + safetensors) with errors a user can act on.
#pragma once

#include <string>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace afd::cli {

struct OpenedModel {
    model::ModelConfig config;
    model::Checkpoint checkpoint;
};

// Errors: kInvalidArgument/kUnsupported for config.json problems (exit code 2), others for the checkpoint.
core::Result<OpenedModel> openModel(const std::string& dir);

// Exit code for a failed Status: configuration problems are 2, everything else 1.
int exitCodeFor(const core::Status& status);

}  // namespace afd::cli
