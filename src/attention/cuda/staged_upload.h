// Host → device copies of arbitrary host memory (mmap'd checkpoint views included) through a bounded pinned staging
// buffer in two halves: the host fills one half (small copies side by side) while the copy engine drains the other.
// Internal to attention/cuda.
//
// Streams: every copy is enqueued on `stream`, in call order, so device work enqueued after a copy on that stream
// (packing what it uploaded) sees it. Threads: one thread at a time. The destructor waits for the copies in flight
// before it frees the staging.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_memory.h"

namespace afd::attention {

class StagedUpload {
public:
    // `staging_bytes` of pinned memory (at least 2 MiB), allocated here.
    StagedUpload(size_t staging_bytes, cudaStream_t stream);
    ~StagedUpload();
    StagedUpload(const StagedUpload&) = delete;
    StagedUpload& operator=(const StagedUpload&) = delete;

    // Enqueues device[0, bytes) = host[0, bytes); returns once `host` has been read (it may be freed then), not when
    // the copy has reached the device.
    void copy(const void* host, void* device, size_t bytes);
    // Waits for every copy enqueued so far.
    void finish();
    uint64_t bytesCopied() const { return bytes_copied_; }

private:
    class Event {
    public:
        Event();
        ~Event();
        Event(const Event&) = delete;
        Event& operator=(const Event&) = delete;
        cudaEvent_t get() const { return event_; }

    private:
        cudaEvent_t event_ = nullptr;
    };

    kernels::cuda::PinnedBuffer pinned_;
    size_t half_bytes_ = 0;
    cudaStream_t stream_ = nullptr;
    std::array<Event, 2> drained_;  // recorded after each copy out of a half
    std::array<bool, 2> in_flight_{false, false};
    size_t slot_ = 0;  // the half being filled
    size_t used_ = 0;  // its bytes enqueued so far
    uint64_t bytes_copied_ = 0;
};

}  // namespace afd::attention
