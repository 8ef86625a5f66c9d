// AFD_CUDA_CHECK / AFD_CUBLAS_CHECK: every CUDA runtime and library call is checked; failures throw
// afd::core::Error naming the call, the file and line, and the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"

namespace afd::kernels::cuda {

[[noreturn]] void throwCudaError(const char* file, int line, const char* expr, cudaError_t error);
[[noreturn]] void throwCublasError(const char* file, int line, const char* expr, int status);

}  // namespace afd::kernels::cuda

#define AFD_CUDA_CHECK(expr)                                                                \
    do {                                                                                    \
        const cudaError_t afd_cuda_err_ = (expr);                                           \
        if (afd_cuda_err_ != cudaSuccess) [[unlikely]] {                                    \
            ::afd::kernels::cuda::throwCudaError(__FILE__, __LINE__, #expr, afd_cuda_err_); \
        }                                                                                   \
    } while (0)

// Checks the last launch (configuration errors) without synchronising.
#define AFD_CUDA_CHECK_LAUNCH() AFD_CUDA_CHECK(cudaGetLastError())

#define AFD_CUBLAS_CHECK(expr)                                                                     \
    do {                                                                                           \
        const int afd_cublas_status_ = static_cast<int>(expr);                                     \
        if (afd_cublas_status_ != 0) [[unlikely]] {                                                \
            ::afd::kernels::cuda::throwCublasError(__FILE__, __LINE__, #expr, afd_cublas_status_); \
        }                                                                                          \
    } while (0)
