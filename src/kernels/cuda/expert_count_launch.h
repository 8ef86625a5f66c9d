// Internal launchers of expert_count.cu; expert_count_cuda.cpp checks the params and the launch status (the public
// API: kernels/expert_count_cuda.h). Host-only header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/expert_count_cuda.h"

namespace afd::kernels::cuda {

cudaError_t launchCountExpertTokens(const ExpertTokenCountParams& params, cudaStream_t stream);
cudaError_t launchSnapshotCounters(const uint64_t* counts, uint64_t* snapshot, int64_t num_counters,
                                   cudaStream_t stream);

}  // namespace afd::kernels::cuda
