#include "attention/device_ops_factory.h"

#include "attention/cpu_ops.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "attention/cuda/cuda_ops.h"
#endif

namespace afd::attention {

core::Result<std::unique_ptr<DeviceOps>> createDeviceOps(core::Device device, CpuPrecision cpu_precision) {
    if (device.isCpu()) return std::unique_ptr<DeviceOps>(std::make_unique<CpuOps>(cpu_precision));
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return createCudaOps(device.index);
#else
    return core::unsupported("device {}: this build has no CUDA attention backend (configure with CUDA to run on GPUs)",
                             device.toString());
#endif
}

}  // namespace afd::attention
