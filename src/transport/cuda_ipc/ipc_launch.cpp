#include "transport/cuda_ipc/ipc_launch.h"

#include "kernels/cuda/cuda_check.h"

namespace afd::transport::cuda_ipc {

void launchIpcPut(const IpcPutParams& params, void* stream) {
    AFD_CUDA_CHECK(ipcPutLaunch(params, static_cast<cudaStream_t>(stream)));
}

void launchIpcWait(const IpcWaitParams& params, void* stream) {
    AFD_CUDA_CHECK(ipcWaitLaunch(params, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::transport::cuda_ipc
