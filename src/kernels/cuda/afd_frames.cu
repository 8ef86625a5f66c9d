// The AFD frame kernels of kernels/afd_frames_cuda.h (their errors are checked in afd_frames_cuda.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/afd_frames_launch.h"
#include "kernels/cuda/kernel_launch.h"

namespace afd::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

unsigned blocksFor(int64_t n) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// Programmatic dependent launch (kernel_launch.h): the kernel waits here for the one before it in the stream.
__device__ __forceinline__ void gridDependencyWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

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
    gridDependencyWait();
    const int64_t n = p.rows * p.cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float sum = 0.0f;
        for (int k = 0; k < p.num_partials; ++k) sum += p.partials[k][i];
        p.out[i] = sum;
    }
}

// The peer whose rows hold batch row r (starts[num_peers] = the gathered rows); num_peers when r is padding.
__device__ __forceinline__ int peerOf(const int64_t* starts, int num_peers, int64_t r) {
    int p = 0;
    while (p < num_peers && r >= starts[p + 1]) ++p;
    return p;
}

// Unit: Vec (int4: 8 bf16, or uint16_t: 1) of x.
template <typename Vec>
__global__ void gatherFfnRowsKernel(GatherFfnRowsParams p) {
    __shared__ int64_t starts[kMaxGatheredPeers + 1];
    if (threadIdx.x == 0) {
        starts[0] = 0;
        for (int k = 0; k < p.num_peers; ++k) starts[k + 1] = starts[k] + p.rows[k];
    }
    __syncthreads();
    gridDependencyWait();  // the frames are there once the connector's wait has finished
    const int64_t total = starts[p.num_peers];
    constexpr int64_t kPerVec = sizeof(Vec) / sizeof(uint16_t);
    const int64_t vecs_per_row = p.hidden / kPerVec;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    Vec* out_x = reinterpret_cast<Vec*>(p.out_x);
    for (int64_t u = tid; u < p.padded_rows * vecs_per_row; u += stride) {
        const int64_t r = u / vecs_per_row;
        const int64_t c = u - r * vecs_per_row;
        Vec v{};
        if (r < total) {
            const int k = peerOf(starts, p.num_peers, r);
            v = reinterpret_cast<const Vec*>(p.x[k])[(r - starts[k]) * vecs_per_row + c];
        }
        out_x[u] = v;
    }
    if (p.routing == GatheredRouting::kRouterHere) {
        if (p.valid_rows != nullptr && tid == 0) *p.valid_rows = static_cast<int32_t>(total);
        return;
    }
    for (int64_t i = tid; i < p.padded_rows * p.top_k; i += stride) {
        const int64_t r = i / p.top_k;
        int32_t id = -1;
        float w = 0.0f;
        if (r < total && p.routing == GatheredRouting::kDense) {
            id = 0;
            w = 1.0f;
        } else if (r < total) {
            const int k = peerOf(starts, p.num_peers, r);
            const int64_t j = (r - starts[k]) * p.top_k + (i - r * p.top_k);
            id = p.ids[k][j];
            w = p.weights[k][j];
            if (id < -1 || id >= p.num_local) {
                if (atomicCAS(p.bad, 0, 1) == 0) {
                    p.bad[1] = p.layer;
                    p.bad[2] = static_cast<int32_t>(i);
                    p.bad[3] = id;
                }
                id = -1;
                w = 0.0f;
            } else if (id >= 0 && p.counts != nullptr) {
                atomicAdd(reinterpret_cast<unsigned long long*>(p.counts + id), 1ull);
            }
        }
        p.out_ids[i] = id;
        p.out_weights[i] = w;
    }
    if (p.valid_rows != nullptr && tid == 0) *p.valid_rows = static_cast<int32_t>(total);
}

}  // namespace

cudaError_t launchGatherFfnRows(const GatherFfnRowsParams& params, cudaStream_t stream) {
    if (params.padded_rows == 0) return cudaSuccess;
    // 16-byte units where every row and pointer allows them (the frames' slots and the batch buffers do).
    bool wide = params.hidden % 8 == 0 && reinterpret_cast<uintptr_t>(params.out_x) % 16 == 0;
    for (int k = 0; k < params.num_peers; ++k) wide = wide && reinterpret_cast<uintptr_t>(params.x[k]) % 16 == 0;
    const int64_t units = params.padded_rows * (wide ? params.hidden / 8 : params.hidden);
    const int64_t routing = params.routing == GatheredRouting::kRouterHere ? 0 : params.padded_rows * params.top_k;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config =
        cuda::pdlLaunchConfig(blocksFor(std::max(units, routing)), kThreads, stream, true, &attr);
    return wide ? cudaLaunchKernelEx(&config, gatherFfnRowsKernel<int4>, params)
                : cudaLaunchKernelEx(&config, gatherFfnRowsKernel<uint16_t>, params);
}

cudaError_t launchSplitRouting(const SplitRoutingParams& params, cudaStream_t stream) {
    if (params.rows * params.top_k == 0) return cudaSuccess;
    splitRoutingKernel<<<blocksFor(params.rows * params.top_k), kThreads, 0, stream>>>(params);
    return cudaGetLastError();
}

cudaError_t launchSumPartials(const SumPartialsParams& params, cudaStream_t stream) {
    if (params.rows * params.cols == 0) return cudaSuccess;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config =
        cuda::pdlLaunchConfig(blocksFor(params.rows * params.cols), kThreads, stream, true, &attr);
    return cudaLaunchKernelEx(&config, sumPartialsKernel, params);
}

}  // namespace afd::kernels
