// Where an attention rank's model comes from: a config and, unless the weights are drawn on the GPU
// (attention/cuda/device_weights.h, randomModelWeights: the values `afd gen-model --seed S` writes), the checkpoint
// to load them from. cli/model_source.h makes one from the flags a user passes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/checkpoint.h"
#include "model/model_config.h"

namespace afd::attention {

struct ModelSource {
    model::ModelConfig config;
    std::optional<model::Checkpoint> checkpoint;  // absent with random weights
    std::string name;                             // for messages: the directory, file or preset
    bool random_weights = false;
    uint64_t weights_seed = 0;
};

}  // namespace afd::attention
