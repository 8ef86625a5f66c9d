// createDeviceOps: CpuOps for the host; for a GPU that is not there (any GPU on a machine without one, or one past the
// visible count), a clear error naming the device, never a crash. Runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "attention/device_ops_factory.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::attention {
namespace {

TEST(DeviceOpsFactory, CpuOpsForTheHost) {
    auto cpu = createDeviceOps(core::Device::cpu());
    ASSERT_TRUE(cpu.isOk()) << cpu.status().toString();
    EXPECT_TRUE((*cpu)->device().isCpu());
    EXPECT_EQ((*cpu)->activationDType(), core::DType::kF32);
    EXPECT_FALSE((*cpu)->supportsGraphs());
}

TEST(DeviceOpsFactory, AMissingGpuIsAClearError) {
#if defined(AFD_HAVE_CUDA_ATTENTION)
    // The first index past the visible GPUs: cuda:0 on a machine without one.
    const int visible = kernels::cuda::deviceCount();
    for (const int gpu : {visible, visible + 3, -1}) {
        auto ops = createDeviceOps(core::Device::cuda(gpu));
        ASSERT_FALSE(ops.isOk());
        EXPECT_EQ(ops.status().code(), core::StatusCode::kInvalidArgument);
        EXPECT_EQ(ops.status().message(), "cuda:" + std::to_string(gpu) + " is not a visible CUDA device (" +
                                              std::to_string(visible) + " visible)");
    }
#else
    auto ops = createDeviceOps(core::Device::cuda(1));
    ASSERT_FALSE(ops.isOk());
    EXPECT_EQ(ops.status().code(), core::StatusCode::kUnsupported);
    EXPECT_NE(ops.status().message().find("cuda:1"), std::string::npos) << ops.status().message();
#endif
}

}  // namespace
}  // namespace afd::attention
