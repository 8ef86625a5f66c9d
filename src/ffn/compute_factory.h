// Creates the FfnCompute for a device: "cpu", or "cuda" (built with the CUDA backend only).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {

// Resolves the GPU of this rank: `device_ids` ("2,3") indexed by local_rank, or local_rank itself when empty.
// Errors name the flag and the rule (a malformed list, LOCAL_RANK past its end, a GPU that does not exist, CUDA
// not built). For "cpu", device_ids must be empty. Returns -1 for cpu.
core::Result<int> resolveDevice(const std::string& device, const std::string& device_ids, int local_rank);

// Takes the loaded weights; for CUDA they are copied to `gpu` once (in the kernels' layout) and the host copy is
// dropped.
core::Result<std::unique_ptr<FfnCompute>> createFfnCompute(const std::string& device, int gpu,
                                                           const model::ModelConfig& config,
                                                           model::ModelWeights weights);

}  // namespace afd::ffn
