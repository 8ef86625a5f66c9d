#include "attention/cuda/staged_upload.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::attention {
namespace {

constexpr size_t kMinStagingBytes = size_t{2} << 20;
constexpr int64_t kCopyPieceBytes = int64_t{1} << 20;  // host memcpy work item (the pool's threads fault in the pages)

// dst = src with the process thread pool (a checkpoint view's first touch faults its pages: in parallel, faster).
void parallelCopy(void* dst, const void* src, size_t bytes) {
    const auto pieces = static_cast<int64_t>((bytes + kCopyPieceBytes - 1) / kCopyPieceBytes);
    core::parallelFor(pieces, 1, [&](int64_t b, int64_t e) {
        const size_t begin = static_cast<size_t>(b * kCopyPieceBytes);
        const size_t end = std::min(bytes, static_cast<size_t>(e * kCopyPieceBytes));
        std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
    });
}

}  // namespace

StagedUpload::Event::Event() { AFD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }

StagedUpload::Event::~Event() {
    if (event_ == nullptr) return;
    const cudaError_t err = cudaEventDestroy(event_);
    if (err != cudaSuccess) AFD_LOG_ERROR("cudaEventDestroy failed: {}", cudaGetErrorString(err));
}

StagedUpload::StagedUpload(size_t staging_bytes, cudaStream_t stream)
    : pinned_(std::max(staging_bytes, kMinStagingBytes) / 2 * 2),
      half_bytes_(std::max(staging_bytes, kMinStagingBytes) / 2),
      stream_(stream) {}

StagedUpload::~StagedUpload() {
    // The copy engine may still read the pinned halves: wait before freeing them (errors only logged here).
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) AFD_LOG_ERROR("waiting for the weight upload failed: {}", cudaGetErrorString(err));
}

void StagedUpload::copy(const void* host, void* device, size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
        if (used_ == half_bytes_) {
            // This half is full: move to the other one once the copies out of it have drained.
            slot_ ^= 1;
            used_ = 0;
            if (in_flight_[slot_]) AFD_CUDA_CHECK(cudaEventSynchronize(drained_[slot_].get()));
            in_flight_[slot_] = false;
        }
        const size_t n = std::min(half_bytes_ - used_, bytes - done);
        char* staging = pinned_.as<char>() + slot_ * half_bytes_ + used_;
        parallelCopy(staging, static_cast<const char*>(host) + done, n);
        AFD_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device) + done, staging, n, cudaMemcpyHostToDevice, stream_));
        AFD_CUDA_CHECK(cudaEventRecord(drained_[slot_].get(), stream_));
        in_flight_[slot_] = true;
        used_ += n;
        done += n;
    }
    bytes_copied_ += bytes;
}

void StagedUpload::finish() {
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    in_flight_ = {false, false};
}

}  // namespace afd::attention
