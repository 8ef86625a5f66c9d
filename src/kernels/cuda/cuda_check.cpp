#include "kernels/cuda/cuda_check.h"

#include <fmt/core.h>

namespace afd::kernels::cuda {

namespace {

// What an operator reads after "unspecified launch failure": the GPU kernels end every bounded wait (a pipeline
// stage's barrier, a ready count) with a trap when it has not completed within seconds (sm90_ptx.cuh), and a trap
// reaches the host as cudaErrorLaunchFailure, sticky for the rest of the process.
constexpr const char* kLaunchFailureHint =
    "; a kernel stopped: afd's GPU kernels stop with a trap when a bounded wait (a pipeline stage, a ready count) has "
    "not completed within seconds, which is a bug to report with this log, and the device stays unusable in this "
    "process until it restarts";

}  // namespace

void throwCudaError(const char* file, int line, const char* expr, cudaError_t error) {
    throw core::Error(fmt::format("{}:{}: CUDA call failed: {}: {} ({}){}", file, line, expr, cudaGetErrorString(error),
                                  static_cast<int>(error), error == cudaErrorLaunchFailure ? kLaunchFailureHint : ""));
}

void throwCublasError(const char* file, int line, const char* expr, int status) {
    throw core::Error(fmt::format("{}:{}: cuBLAS call failed: {}: status {}", file, line, expr, status));
}

}  // namespace afd::kernels::cuda
