// The nccl connector's kernels (nccl_device.h): one thread per peer writes a send header, or checks a received one.
// Launch errors are checked in nccl_launch.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "transport/nccl/nccl_launch.h"

namespace afd::transport::nccl {
namespace {

__device__ __forceinline__ uint32_t loadVolatile(const uint32_t* ptr) {
    return *static_cast<const volatile uint32_t*>(ptr);
}

__global__ void headerWriteKernel(NcclHeaderWriteParams p) {
    const int i = threadIdx.x;
    if (i >= p.num_peers) return;
    NcclFrameHeader h;
    h.magic = kFrameHeaderMagic;
    h.layer = p.layer;
    h.stage = p.stage;
    h.rows = p.rows[i];
    *p.header[i] = h;
}

__global__ void headerCheckKernel(NcclHeaderCheckParams p) {
    const int i = threadIdx.x;
    if (i >= p.num_peers) return;
    const uint32_t peer = p.peer_index[i];
    // The group that received the header ran before this kernel in stream order: a plain load sees its bytes.
    const NcclFrameHeader h = *p.header[i];
    const unsigned long long taken = atomicAdd(&p.frames[peer], 1ull) + 1ull;
    *static_cast<volatile uint64_t*>(&p.progress[peer]) = taken;
    const bool ok = h.magic == kFrameHeaderMagic && h.layer == p.layer && h.stage == p.stage && h.rows == p.rows[i];
    if (ok || loadVolatile(p.failed) != 0) return;
    if (atomicCAS(p.claimed, 0u, 1u) != 0u) return;  // an earlier mismatch holds the record
    volatile NcclHeaderError* e = p.error;
    e->peer = peer;
    e->expected_layer = p.layer;
    e->expected_stage = p.stage;
    e->expected_rows = p.rows[i];
    e->got_magic = h.magic;
    e->got_layer = h.layer;
    e->got_stage = h.stage;
    e->got_rows = h.rows;
    __threadfence_system();
    e->code = kNcclCheckBadHeader;
    __threadfence_system();
}

}  // namespace

cudaError_t ncclHeaderWriteLaunch(const NcclHeaderWriteParams& params, cudaStream_t stream) {
    if (params.num_peers <= 0) return cudaSuccess;
    headerWriteKernel<<<1, 32, 0, stream>>>(params);
    return cudaGetLastError();
}

cudaError_t ncclHeaderCheckLaunch(const NcclHeaderCheckParams& params, cudaStream_t stream) {
    if (params.num_peers <= 0) return cudaSuccess;
    headerCheckKernel<<<1, 32, 0, stream>>>(params);
    return cudaGetLastError();
}

}  // namespace afd::transport::nccl
