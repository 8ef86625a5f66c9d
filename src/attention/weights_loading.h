// An attention rank's weights where its ops run: host weights from the checkpoint on the CPU; on a GPU uploaded from
// the checkpoint or drawn there (random weights), after checking that they fit beside the engine.
#pragma once

#include <cstdint>

#include "attention/model_source.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/weights.h"

namespace afd::attention {

// kInvalidArgument naming --random-weights when the source's weights cannot be made on `device` (random weights are
// drawn on a GPU only).
core::Status checkWeightsDevice(const ModelSource& source, core::Device device);

// The weights of `selection` for ops on `device`: on the CPU the host weights loaded from the checkpoint (random
// weights are refused there, naming --random-weights); on cuda:G uploaded from the checkpoint (the host copy freed on
// return) or drawn from the source's seed, after checkDeviceWeightsFit with `other_device_bytes` beside them. Logs
// the bytes and the rates (checkpoint read and packed; uploaded). `progress` follows the checkpoint's layers.
core::Result<model::ModelWeights> weightsForDevice(const ModelSource& source, const model::WeightSelection& selection,
                                                   core::Device device, uint64_t other_device_bytes,
                                                   const model::LoadProgress& progress = {});

}  // namespace afd::attention
