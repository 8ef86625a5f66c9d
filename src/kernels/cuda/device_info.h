// Queries about the CUDA devices visible to this process. Safe to call on a machine without a GPU.
#pragma once

#include <string>

namespace afd::kernels::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device (never throws).
int deviceCount();

struct DeviceInfo {
    std::string name;
    int sm_count = 0;
    int compute_major = 0;
    int compute_minor = 0;
    size_t total_memory = 0;
    size_t l2_bytes = 0;
    size_t max_shared_per_block_optin = 0;
};

// Throws afd::core::Error if `device` does not exist.
DeviceInfo deviceInfo(int device);

// Whether contexts on `device` are MPS clients (cudaDevAttrMpsEnabled): kernels of other processes may then run on
// its SMs beside this process's. Throws afd::core::Error if `device` does not exist.
bool sharedThroughMps(int device);

}  // namespace afd::kernels::cuda
