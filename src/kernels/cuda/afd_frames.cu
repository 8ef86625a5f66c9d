// The AFD frame kernels of kernels/afd_frames_cuda.h (their errors are checked in afd_frames_cuda.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/afd_frames_launch.h"

namespace afd::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

unsigned blocksFor(int64_t n) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__global__ void splitRoutingKernel(SplitRoutingParams p) {
    const int64_t n = p.rows * p.top_k;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int32_t e = p.ids[i];
        const bool here = e >= p.begin && e < p.end;
        p.local_ids[i] = here ? e - p.begin : -1;
        p.local_weights[i] = here ? p.weights[i] : 0.0f;
    }
}

__global__ void sumPartialsKernel(SumPartialsParams p) {
    const int64_t n = p.rows * p.cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float sum = 0.0f;
        for (int k = 0; k < p.num_partials; ++k) sum += p.partials[k][i];
        p.out[i] = sum;
    }
}

__global__ void checkLocalIdsKernel(CheckLocalIdsParams p) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += stride) {
        const int32_t id = p.ids[i];
        if (id >= -1 && id < p.num_local) continue;
        p.ids[i] = -1;
        if (atomicCAS(p.bad, 0, 1) == 0) {
            p.bad[1] = p.layer;
            p.bad[2] = static_cast<int32_t>(i);
            p.bad[3] = id;
        }
    }
}

}  // namespace

cudaError_t launchCheckLocalIds(const CheckLocalIdsParams& params, cudaStream_t stream) {
    if (params.count == 0) return cudaSuccess;
    checkLocalIdsKernel<<<blocksFor(params.count), kThreads, 0, stream>>>(params);
    return cudaGetLastError();
}

cudaError_t launchSplitRouting(const SplitRoutingParams& params, cudaStream_t stream) {
    if (params.rows * params.top_k == 0) return cudaSuccess;
    splitRoutingKernel<<<blocksFor(params.rows * params.top_k), kThreads, 0, stream>>>(params);
    return cudaGetLastError();
}

cudaError_t launchSumPartials(const SumPartialsParams& params, cudaStream_t stream) {
    if (params.rows * params.cols == 0) return cudaSuccess;
    sumPartialsKernel<<<blocksFor(params.rows * params.cols), kThreads, 0, stream>>>(params);
    return cudaGetLastError();
}

}  // namespace afd::kernels
