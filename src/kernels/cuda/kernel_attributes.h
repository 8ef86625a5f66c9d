// Kernel attributes set once per device before a kernel's first launch on it, so that later launches (those inside a
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

}  // namespace afd::kernels::cuda
