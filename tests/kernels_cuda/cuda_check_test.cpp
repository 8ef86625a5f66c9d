#include "kernels/cuda/cuda_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace afd::kernels::cuda {
namespace {

std::string messageOf(cudaError_t error) {
    try {
        AFD_CUDA_CHECK(error);
    } catch (const core::Error& e) {
        return e.what();
    }
    return "";
}

// No device needed: the checks only format the runtime's error.
TEST(CudaCheckTest, NamesTheCallTheErrorAndItsCode) {
    const std::string message = messageOf(cudaErrorMemoryAllocation);
    EXPECT_THAT(message, testing::HasSubstr("CUDA call failed: error: out of memory (2)"));
    EXPECT_THAT(message, testing::HasSubstr("cuda_check_test.cpp"));
    EXPECT_THAT(message, testing::Not(testing::HasSubstr("bounded wait")));
    EXPECT_EQ(messageOf(cudaSuccess), "");
}

// A trap in a kernel (the end of every bounded GPU wait) reaches the host as cudaErrorLaunchFailure (719, measured on
// the H200 with a kernel that calls __trap()): the message says what stops afd's kernels and that the process must
// restart.
TEST(CudaCheckTest, ExplainsALaunchFailureAsAStoppedKernel) {
    const std::string message = messageOf(cudaErrorLaunchFailure);
    EXPECT_THAT(message, testing::HasSubstr("unspecified launch failure (719)"));
    EXPECT_THAT(message, testing::HasSubstr("bounded wait"));
    EXPECT_THAT(message, testing::HasSubstr("restarts"));
}

}  // namespace
}  // namespace afd::kernels::cuda
