// Picks the DeviceOps implementation for a device: CpuOps for the host, CudaOps (attention/cuda/cuda_ops.h) for a GPU
// when the build has the CUDA attention backend.
#pragma once

#include <memory>

#include "attention/cpu_ops.h"
#include "attention/device_ops.h"
#include "core/status.h"

namespace afd::attention {

// For cuda:N the GPU is made current on the calling thread. Errors name the device: invalidArgument "cuda:N is not a
// visible CUDA device (M visible)"; unsupported for a GPU the kernels are not built for, and for any GPU in a build
// without the CUDA backend. `cpu_precision` picks the host engine's precision (CpuOps); a GPU computes in BF16.
core::Result<std::unique_ptr<DeviceOps>> createDeviceOps(core::Device device,
                                                         CpuPrecision cpu_precision = CpuPrecision::kFp32);

}  // namespace afd::attention
