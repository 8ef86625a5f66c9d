#include "kernels/cuda/afd_frames_launch.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::kernels {

void splitRoutingCuda(const SplitRoutingParams& params, void* stream) {
    AFD_CUDA_CHECK(launchSplitRouting(params, static_cast<cudaStream_t>(stream)));
}

void sumPartialsCuda(const SumPartialsParams& params, void* stream) {
    AFD_CHECK(params.num_partials >= 1 && params.num_partials <= kMaxSummedPartials, "{} partials (1 ... {})",
              params.num_partials, kMaxSummedPartials);
    AFD_CUDA_CHECK(launchSumPartials(params, static_cast<cudaStream_t>(stream)));
}

void checkLocalIdsCuda(const CheckLocalIdsParams& params, void* stream) {
    AFD_CUDA_CHECK(launchCheckLocalIds(params, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
