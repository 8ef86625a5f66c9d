// Creates the FfnCompute for a device: "cpu", or "cuda" (built with the CUDA backend only).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::ffn {

// The GPU index for `local_rank`: `device_ids` ("2,3") indexed by local_rank, or local_rank itself when empty
// (LOCAL_RANK=1 with --device-ids 2,3 → GPU 3). A GPU may appear more than once (ranks sharing it: "0,0").
// Checks the list's syntax only, not that the GPU exists.
core::Result<int> mapLocalRankToGpu(const std::string& device_ids, int local_rank);

// Resolves the GPU of this rank: `device_ids` ("2,3") indexed by local_rank, or local_rank itself when empty.
// Errors name the flag and the rule (a malformed list, LOCAL_RANK past its end, a GPU that does not exist, CUDA
// not built). For "cpu", device_ids must be empty. Returns -1 for cpu.
core::Result<int> resolveDevice(const std::string& device, const std::string& device_ids, int local_rank);

// Before any weight is read: whether the device can hold what createFfnCompute will allocate for the weights
// `selection` picks and calls of up to `max_rows` rows (cuda: checkCudaFfnFits; cpu: host memory is not checked).
core::Status checkFfnComputeFits(const std::string& device, int gpu, const model::ModelConfig& config,
                                 const model::WeightSelection& selection, int64_t max_rows);

// Takes the loaded weights; for CUDA they are copied to `gpu` once (in the kernels' layout) and the host copy is
// dropped. `max_rows`: the most tokens one call may carry (sizes the GPU's staging buffers). `num_device_lanes`: 0
// for a rank fed through host memory; the lanes of its device entry points for one fed by a device connector (cuda).
core::Result<std::unique_ptr<FfnCompute>> createFfnCompute(const std::string& device, int gpu,
                                                           const model::ModelConfig& config,
                                                           model::ModelWeights weights, int64_t max_rows,
                                                           int num_device_lanes = 0, bool enforce_eager = false);

// As createFfnCompute, with the weights `afd gen-model --seed seed` writes for `selection` drawn on the GPU instead of
// loaded (cuda only: kInvalidArgument for the CPU, which has no generator).
core::Result<std::unique_ptr<FfnCompute>> createRandomFfnCompute(const std::string& device, int gpu,
                                                                 const model::ModelConfig& config,
                                                                 const model::WeightSelection& selection, uint64_t seed,
                                                                 int64_t max_rows, int num_device_lanes = 0,
                                                                 bool enforce_eager = false);

}  // namespace afd::ffn
