#include "kernels/fill_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill_launch.h"

namespace afd::kernels {

void fillWords32Cuda(void* dst, uint32_t value, int64_t count, void* stream) {
    AFD_CUDA_CHECK(launchFillWords32(dst, value, count, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
