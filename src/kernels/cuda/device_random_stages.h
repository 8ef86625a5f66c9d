// Internal launchers of the synthetic-weight kernels (device_random.cu); kernels/device_random.h is the public face,
// whose functions check the arguments and these launch statuses.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace afd::kernels::cuda {

cudaError_t launchSyntheticFill(uint16_t* out, int64_t count, uint64_t key, float centre, float half_width,
                                cudaStream_t stream);

// keys [experts, 3] (gate, up, down); w13_packed / w2_packed in moePackWeightsCuda's layout.
cudaError_t launchSyntheticPackedMlp(const uint64_t* keys, int64_t experts, int64_t hidden, int64_t inter,
                                     float gate_up_half_width, float down_half_width, uint16_t* w13_packed,
                                     uint16_t* w2_packed, cudaStream_t stream);

}  // namespace afd::kernels::cuda
