#include "kernels/cuda/device_info.h"

#include "kernels/cuda/cuda_check.h"

namespace afd::kernels::cuda {

int deviceCount() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return count;
}

DeviceInfo deviceInfo(int device) {
    cudaDeviceProp prop{};
    AFD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    DeviceInfo info;
    info.name = prop.name;
    info.sm_count = prop.multiProcessorCount;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.total_memory = prop.totalGlobalMem;
    info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    info.max_shared_per_block_optin = prop.sharedMemPerBlockOptin;
    return info;
}

bool sharedThroughMps(int device) {
    int enabled = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&enabled, cudaDevAttrMpsEnabled, device));
    return enabled != 0;
}

}  // namespace afd::kernels::cuda
