// The cuda_ipc kernels (ipc_device.h): the put copies a frame's segments into the peer's slot with every block of the
// grid, and the block that finishes last publishes the control block; the wait spins on each peer's frame number with
// acquire loads, bounded by the timeout and the host's abort words. Launch errors are checked in ipc_launch.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "transport/cuda_ipc/ipc_launch.h"

namespace afd::transport::cuda_ipc {
namespace {

constexpr int kPutThreads = 256;
// Up to one block per SM of an H200: a frame of up to 2 MiB (T = 256 FP32 hidden rows) is out in a few passes.
constexpr int kMaxPutBlocks = 132;
constexpr uint64_t kBytesPerBlock = 16 * 1024;
// Spins between looks at the abort word (host memory, a PCIe read) and the clock.
constexpr uint32_t kSpinsPerCheck = 256;

__device__ __forceinline__ uint64_t loadAcquireSys(const uint64_t* ptr) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(ptr) : "memory");
    return v;
}

__device__ __forceinline__ void storeReleaseSys(uint64_t* ptr, uint64_t v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t loadAcquireGpu(const uint64_t* ptr) {
    uint64_t v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(ptr) : "memory");
    return v;
}

__device__ __forceinline__ void storeReleaseGpu(uint64_t* ptr, uint64_t v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(ptr), "l"(v) : "memory");
}

__device__ __forceinline__ void fence(bool system) {
    if (system) {
        __threadfence_system();
    } else {
        __threadfence();
    }
}

__device__ __forceinline__ uint64_t globalTimerNs() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Programmatic dependent launch: waits for the kernel before this one in the stream (a no-op after a normal launch),
// and lets the one after this start.
__device__ __forceinline__ void gridDependencyWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void launchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ uint32_t loadVolatile(const uint32_t* ptr) {
    return *static_cast<const volatile uint32_t*>(ptr);
}

// Copies `bytes` with the widest unit that src, dst and bytes all align to; this block's share of the grid.
__device__ void copySegment(const void* src, void* dst, uint64_t bytes) {
    const uint64_t bits = reinterpret_cast<uint64_t>(src) | reinterpret_cast<uint64_t>(dst) | bytes;
    const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    if ((bits & 15) == 0) {
        const int4* s = static_cast<const int4*>(src);
        int4* d = static_cast<int4*>(dst);
        for (uint64_t i = tid; i < bytes / 16; i += stride) d[i] = s[i];
    } else if ((bits & 3) == 0) {
        const uint32_t* s = static_cast<const uint32_t*>(src);
        uint32_t* d = static_cast<uint32_t*>(dst);
        for (uint64_t i = tid; i < bytes / 4; i += stride) d[i] = s[i];
    } else {
        const uint8_t* s = static_cast<const uint8_t*>(src);
        uint8_t* d = static_cast<uint8_t*>(dst);
        for (uint64_t i = tid; i < bytes; i += stride) d[i] = s[i];
    }
}

__global__ void __launch_bounds__(kPutThreads) ipcPutKernel(IpcPutParams p) {
    // The frame's bytes are the previous kernel's output; the wait that follows this put may start spinning now.
    gridDependencyWait();
    launchDependents();
    // A connector that failed, or a peer that is gone: its memory is not written again.
    const bool skip = loadVolatile(p.failed) != 0 || loadVolatile(p.abort) != 0;
    if (!skip) {
        for (int s = 0; s < p.num_segments; ++s) copySegment(p.src[s], p.dst[s], p.bytes[s]);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    // Every block's copies are visible (at system scope when the peer is another GPU) before it counts itself done.
    fence(p.system_scope);
    const unsigned int done = atomicAdd(p.ctas_done, 1u);
    if (done != gridDim.x - 1) return;
    // The last block: all copies are out. Publish the control fields, then the frame's number.
    *p.ctas_done = 0;
    if (skip || loadVolatile(p.failed) != 0) return;
    volatile SlotControl* c = p.control;
    c->layer = p.layer;
    c->stage = p.stage;
    c->rows = p.rows;
    fence(p.system_scope);
    const uint64_t seq = *p.sent + 1;
    *p.sent = seq;
    if (p.system_scope) {
        storeReleaseSys(&p.control->seq, seq);
    } else {
        storeReleaseGpu(&p.control->seq, seq);
    }
}

// Records the connector's first failure (one thread of one wait gets to write it).
__device__ void raise(const IpcWaitParams& p, int i, uint32_t code, uint32_t reason, uint64_t got_seq,
                      uint64_t expected_seq, const SlotControl* seen) {
    if (atomicCAS(p.failed, 0u, 1u) != 0u) return;
    volatile IpcDeviceError* e = p.error;
    e->peer = p.peer_index[i];
    e->layer = p.layer;
    e->stage = p.stage;
    e->abort_reason = reason;
    e->got_seq = got_seq;
    e->expected_seq = expected_seq;
    e->expected_rows = p.rows[i];
    if (seen != nullptr) {
        const volatile SlotControl* c = seen;
        e->got_layer = c->layer;
        e->got_stage = c->stage;
        e->got_rows = c->rows;
    }
    __threadfence_system();
    e->code = code;
    __threadfence_system();
}

// Spins for peer i's frame; true when it came and is the expected one (the failures are raised).
__device__ bool awaitFrame(const IpcWaitParams& p, int i, uint64_t want) {
    const uint64_t start = globalTimerNs();
    uint32_t spins = 0;
    const bool system = p.system_scope[i];
    for (;;) {
        const uint64_t got = system ? loadAcquireSys(&p.control[i]->seq) : loadAcquireGpu(&p.control[i]->seq);
        if (got == want) {
            const volatile SlotControl* c = p.control[i];
            if (c->layer != p.layer || c->stage != p.stage || c->rows != p.rows[i]) {
                raise(p, i, kIpcBadFrame, kAbortNone, got, want, p.control[i]);
                return false;
            }
            return true;
        }
        if (got > want) {  // a frame was overwritten before it was taken: the two ends disagree on the schedule
            raise(p, i, kIpcBadFrame, kAbortNone, got, want, p.control[i]);
            return false;
        }
        if (++spins % kSpinsPerCheck != 0) continue;
        if (loadVolatile(p.failed) != 0) return false;
        const uint32_t reason = loadVolatile(p.abort[i]);
        if (reason != kAbortNone) {
            raise(p, i, kIpcAborted, reason, got, want, nullptr);
            return false;
        }
        if (globalTimerNs() - start > p.timeout_ns) {
            raise(p, i, kIpcTimeout, kAbortNone, got, want, nullptr);
            return false;
        }
    }
}

// Launched programmatically: it spins while the put before it in the stream still runs (the frame it waits for is
// the peer's answer, not that put's output), and finishes only after that kernel has, so the kernels after the wait
// see everything before it.
__global__ void ipcWaitKernel(IpcWaitParams p) {
    const int i = threadIdx.x;
    const bool mine = i < p.num_peers;
    // An earlier wait failed: drain.
    const uint64_t want = mine ? *p.received[i] + 1 : 0;
    const bool got = mine && loadVolatile(p.failed) == 0 && awaitFrame(p, i, want);
    gridDependencyWait();
    if (got) *p.received[i] = want;
}

}  // namespace

// grid x block on `stream`; with programmatic dependent launch when `programmatic` (the kernel may start while the one
// before it runs; griddepcontrol.wait orders it).
template <typename Params>
cudaError_t launch(void (*kernel)(Params), const Params& params, unsigned grid, unsigned block, cudaStream_t stream,
                   bool programmatic) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attr;
    config.numAttrs = programmatic ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, params);
}

cudaError_t ipcPutLaunch(const IpcPutParams& params, cudaStream_t stream) {
    uint64_t total = 0;
    for (int s = 0; s < params.num_segments; ++s) total += params.bytes[s];
    const uint64_t blocks = std::clamp<uint64_t>((total + kBytesPerBlock - 1) / kBytesPerBlock, 1, kMaxPutBlocks);
    // A put that only publishes follows the copy engine's copies, which are no kernel to overlap.
    return launch(ipcPutKernel, params, static_cast<unsigned>(blocks), kPutThreads, stream, params.num_segments > 0);
}

cudaError_t ipcWaitLaunch(const IpcWaitParams& params, cudaStream_t stream) {
    return launch(ipcWaitKernel, params, 1, 32, stream, true);
}

}  // namespace afd::transport::cuda_ipc
