// A short string that identifies a model for the AFD handshake: two processes that load different models (other
// shapes, or the same shapes with other weights) get different fingerprints, so the connector refuses to pair
// them and shows both values.
//
// It holds the shapes that matter to both roles and a 64-bit hash of those shapes plus the first bytes of a few
// tensors every checkpoint has (final norm, embedding, first and last expert of the first MoE layer): both roles
// open the same checkpoint, so both can read them, and reading them costs a few pages.
#pragma once

#include <string>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace afd::model {

// e.g. "qwen3_moe L48 H2048 E128x768 K8 V151936 #3f9c0a7e12b4d856"
core::Result<std::string> modelFingerprint(const ModelConfig& config, const Checkpoint& checkpoint);

// The fingerprint of the model `--random-weights` draws with `seed` for `config` (no checkpoint: the values are a
// function of the seed and the tensor names), e.g. "qwen3_moe L48 H2048 E128x768 K8 V151936 #… random:1". It never
// equals a checkpoint's, since a checkpoint written with the seed may have been edited.
std::string randomModelFingerprint(const ModelConfig& config, uint64_t seed);

}  // namespace afd::model
