// Host-side launch helpers of the MoE kernels: the launch configuration with programmatic dependent launch, and
// kernel attributes set once per device before a kernel's first launch on it, so that later launches (those inside a
// stream capture included) make no attribute calls. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace afd::kernels::cuda {

// Runs `configure` (returning a cudaError_t) the first time it is called for the current device with this
// `configured_devices` mask (one static mask per kernel); devices 64 and up are configured on every call.
template <class Configure>
cudaError_t configureOncePerDevice(std::atomic<uint64_t>& configured_devices, Configure&& configure) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
        return err;
    }
    const uint64_t device_bit = device < 64 ? (uint64_t{1} << device) : 0;
    if (device_bit != 0 && (configured_devices.load(std::memory_order_acquire) & device_bit) != 0) {
        return cudaSuccess;
    }
    err = configure();
    if (err == cudaSuccess) {
        configured_devices.fetch_or(device_bit, std::memory_order_acq_rel);
    }
    return err;
}

// grid x block threads on `stream`, with programmatic dependent launch (the kernel may start while the previous one
// in the stream runs, and waits for it with griddepcontrol.wait) when `programmatic`. `attr` (the caller's, alive
// until the launch) holds the attribute.
inline cudaLaunchConfig_t pdlLaunchConfig(unsigned grid, unsigned block, cudaStream_t stream, bool programmatic,
                                          cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.stream = stream;
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = programmatic ? 1 : 0;
    return config;
}

// The largest shared-memory carveout for `kernel`, once per device (one static mask per kernel): an SM set up for a
// smaller one would not take the CTAs of a kernel with the largest one that start beside this kernel's.
template <class Kernel>
cudaError_t maxSharedCarveoutOnce(Kernel kernel, std::atomic<uint64_t>& configured_devices) {
    return configureOncePerDevice(configured_devices, [kernel] {
        return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared);
    });
}

}  // namespace afd::kernels::cuda
