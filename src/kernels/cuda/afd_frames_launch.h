// The raw launchers behind kernels/afd_frames_cuda.h (afd_frames.cu; no fmt headers, which nvcc cannot take).
#pragma once

#include <cuda_runtime.h>

#include "kernels/afd_frames_cuda.h"

namespace afd::kernels {

cudaError_t launchSplitRouting(const SplitRoutingParams& params, cudaStream_t stream);
cudaError_t launchSumPartials(const SumPartialsParams& params, cudaStream_t stream);
cudaError_t launchGatherFfnRows(const GatherFfnRowsParams& params, cudaStream_t stream);

}  // namespace afd::kernels
