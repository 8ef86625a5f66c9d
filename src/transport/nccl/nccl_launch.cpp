#include "transport/nccl/nccl_launch.h"

#include "kernels/cuda/cuda_check.h"

namespace afd::transport::nccl {

void launchNcclHeaderWrite(const NcclHeaderWriteParams& params, void* stream) {
    AFD_CUDA_CHECK(ncclHeaderWriteLaunch(params, static_cast<cudaStream_t>(stream)));
}

void launchNcclHeaderCheck(const NcclHeaderCheckParams& params, void* stream) {
    AFD_CUDA_CHECK(ncclHeaderCheckLaunch(params, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::transport::nccl
