// RAII owners of CUDA resources (used by the GPU FFN compute and the benchmarks): device and pinned host buffers, a
// stream, an instantiated graph. Each frees its resource exactly once; destructors never throw (a failing free is
// logged).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace afd::kernels::cuda {

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);  // cudaMalloc on the current device; throws afd::core::Error on failure
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t bytes);  // cudaMallocHost
    ~PinnedBuffer();
    PinnedBuffer(PinnedBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

class Stream {
public:
    Stream();  // non-blocking stream on the current device
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

// An event on the current device: without timing (ordering between streams, the fork/join of a multi-stream capture),
// or with it (cudaEventElapsedTime).
class Event {
public:
    explicit Event(bool timing = false);
    ~Event();
    Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
    Event& operator=(Event&&) = delete;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const { return event_; }

private:
    cudaEvent_t event_ = nullptr;
};

class GraphExec {
public:
    GraphExec() = default;
    explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
    ~GraphExec();
    GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
    GraphExec& operator=(GraphExec&& other) noexcept;
    GraphExec(const GraphExec&) = delete;
    GraphExec& operator=(const GraphExec&) = delete;
    cudaGraphExec_t get() const { return exec_; }

private:
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace afd::kernels::cuda
