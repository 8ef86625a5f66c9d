// The raw launchers behind launchNcclHeaderWrite / launchNcclHeaderCheck (nccl_device.cu; no logging or fmt headers,
// which nvcc cannot take). nccl_launch.cpp checks their errors.
#pragma once

#include <cuda_runtime.h>

#include "transport/nccl/nccl_device.h"

namespace afd::transport::nccl {

cudaError_t ncclHeaderWriteLaunch(const NcclHeaderWriteParams& params, cudaStream_t stream);
cudaError_t ncclHeaderCheckLaunch(const NcclHeaderCheckParams& params, cudaStream_t stream);

}  // namespace afd::transport::nccl
