// The raw launchers behind launchIpcPut / launchIpcWait (ipc_device.cu; no logging or fmt headers, which nvcc cannot
// take). ipc_launch.cpp checks their errors.
#pragma once

#include <cuda_runtime.h>

#include "transport/cuda_ipc/ipc_device.h"

namespace afd::transport::cuda_ipc {

cudaError_t ipcPutLaunch(const IpcPutParams& params, cudaStream_t stream);
cudaError_t ipcWaitLaunch(const IpcWaitParams& params, cudaStream_t stream);

}  // namespace afd::transport::cuda_ipc
