#include "kernels/cuda/device_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "kernels/cuda/device_info.h"

namespace afd::kernels::cuda {
namespace {

// A request the device cannot hold names the bytes asked for and the memory free, and leaves the device usable (an
// allocation failure is not sticky, unlike a kernel's trap).
TEST(DeviceBufferTest, NamesTheBytesAndTheFreeMemoryWhenTheDeviceIsFull) {
    if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    std::string message;
    try {
        DeviceBuffer too_big(size_t{1} << 50);
    } catch (const core::Error& e) {
        message = e.what();
    }
    EXPECT_THAT(message, ::testing::HasSubstr("cannot allocate 1125899906842624 bytes of device memory on cuda:"));
    EXPECT_THAT(message, ::testing::HasSubstr("bytes free): out of memory"));
    DeviceBuffer fits(1 << 20);
    EXPECT_NE(fits.get(), nullptr);
}

}  // namespace
}  // namespace afd::kernels::cuda
