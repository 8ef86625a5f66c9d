#include "kernels/cuda/device_memory.h"

#include <fmt/core.h>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::kernels::cuda {
namespace {

void logFree(const char* what, cudaError_t error) {
    if (error != cudaSuccess) AFD_LOG_ERROR("{} failed: {}", what, cudaGetErrorString(error));
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t cuda_malloc = cudaMalloc(&ptr_, bytes);
    if (cuda_malloc == cudaErrorMemoryAllocation) {
        // Not sticky: the device stays usable. Say how much was asked for and what was free (another process or a
        // rank sharing the GPU may have taken it since the rank's load checked).
        (void)cudaGetLastError();
        int device = -1;
        size_t free_bytes = 0, total_bytes = 0;
        const bool known =
            cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
        throw core::Error(fmt::format("cannot allocate {} bytes of device memory on cuda:{}{}: out of memory", bytes,
                                      device,
                                      known ? fmt::format(" ({} of {} bytes free)", free_bytes, total_bytes) : ""));
    }
    AFD_CUDA_CHECK(cuda_malloc);
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_ != nullptr) logFree("cudaFree", cudaFree(ptr_));
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_ != nullptr) logFree("cudaFree", cudaFree(ptr_));
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = other.bytes_;
    }
    return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) AFD_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
    if (ptr_ != nullptr) logFree("cudaFreeHost", cudaFreeHost(ptr_));
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_ != nullptr) logFree("cudaFreeHost", cudaFreeHost(ptr_));
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = other.bytes_;
    }
    return *this;
}

Stream::Stream() { AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() {
    if (stream_ != nullptr) logFree("cudaStreamDestroy", cudaStreamDestroy(stream_));
}

Event::Event(bool timing) {
    AFD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
    if (event_ != nullptr) logFree("cudaEventDestroy", cudaEventDestroy(event_));
}

GraphExec::~GraphExec() {
    if (exec_ != nullptr) logFree("cudaGraphExecDestroy", cudaGraphExecDestroy(exec_));
}

GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
    if (this != &other) {
        if (exec_ != nullptr) logFree("cudaGraphExecDestroy", cudaGraphExecDestroy(exec_));
        exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
}

}  // namespace afd::kernels::cuda
