// The memory of the cuda_ipc connector (host side): a rank's inbox (the control blocks and data slots its peers write
// into, one device allocation exported through one CUDA IPC handle), a peer's inbox opened through its handle, the
// rank's own frame counters in device memory, and the host-mapped words the device waits read (abort words) and
// write (the first error).
//
// Inbox layout: channel c = stage * num_senders + sender; the control blocks of every channel first (64 bytes each),
// then one slot of slot_bytes per channel, every slot aligned to 256 bytes. A frame's segments sit in its slot at
// offsets fixed by the frame spec and the agreed maximum rows (slotLayout), so both ends place them alike.
//
// Every object makes its own GPU current where it calls CUDA; all are owned by one connector and used by its thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"
#include "transport/cuda_ipc/ipc_device.h"
#include "transport/frame.h"

namespace afd::transport::cuda_ipc {

inline constexpr size_t kSlotAlignment = 256;

struct InboxLayout {
    uint32_t num_senders = 0;
    uint32_t num_stages = 0;
    uint64_t slot_bytes = 0;

    uint32_t numChannels() const { return num_senders * num_stages; }
    uint32_t channel(uint32_t stage, uint32_t sender) const { return stage * num_senders + sender; }
    uint64_t controlOffset(uint32_t channel) const { return uint64_t{channel} * sizeof(SlotControl); }
    uint64_t slotOffset(uint32_t channel) const;
    uint64_t totalBytes() const;
    bool operator==(const InboxLayout&) const = default;
};

// Where each segment of a frame of `spec` sits in a slot sized for `max_rows` rows.
struct SlotLayout {
    int count = 0;
    std::array<uint64_t, kMaxIpcSegments> offsets{};
    std::array<uint64_t, kMaxIpcSegments> row_bytes{};
    uint64_t bytes = 0;  // the slot size it needs
};
core::Result<SlotLayout> slotLayout(const FrameSpec& spec, uint32_t max_rows);

// This host's boot id (/proc/sys/kernel/random/boot_id): equal on two ranks iff they run on one host (boot).
std::string hostBootId();

// A rank's inbox on the current GPU.
class LocalInbox {
public:
    static core::Result<std::unique_ptr<LocalInbox>> create(const InboxLayout& layout, int gpu);
    ~LocalInbox();
    LocalInbox(const LocalInbox&) = delete;
    LocalInbox& operator=(const LocalInbox&) = delete;

    const InboxLayout& layout() const { return layout_; }
    // The rendezvous blob: the IPC handle, the layout, the owner's pid, host boot id and GPU uuid.
    std::string exportBlob() const;
    SlotControl* control(uint32_t channel) const;
    uint8_t* slot(uint32_t channel) const;
    uint64_t bytes() const { return layout_.totalBytes(); }

private:
    LocalInbox() = default;
    InboxLayout layout_;
    int gpu_ = 0;
    void* base_ = nullptr;  // cudaMalloc'd
    std::string handle_;    // cudaIpcMemHandle_t bytes
    std::string uuid_;      // the GPU's (cudaDeviceProp::uuid)
};

// A peer's inbox, mapped into this process (cudaIpcOpenMemHandle on the current GPU); closed on destruction.
class RemoteInbox {
public:
    // Checks the blob (format, same host, the layout this rank expects) and opens it. Errors name `peer`: kMismatch for
    // another host or layout, kCorrupt for a blob that does not parse, kInternal when CUDA refuses the handle.
    static core::Result<std::unique_ptr<RemoteInbox>> open(std::string_view blob, const InboxLayout& expected, int gpu,
                                                           std::string_view peer);
    ~RemoteInbox();
    RemoteInbox(const RemoteInbox&) = delete;
    RemoteInbox& operator=(const RemoteInbox&) = delete;

    SlotControl* control(uint32_t channel) const;
    uint8_t* slot(uint32_t channel) const;
    // The inbox is on this process's GPU (GPU-scope ordering suffices), not on a peer GPU.
    bool sameGpu() const { return same_gpu_; }

private:
    RemoteInbox() = default;
    InboxLayout layout_;
    int gpu_ = 0;
    void* base_ = nullptr;  // the mapping
    bool same_gpu_ = false;
};

// The rank's own device words: per outgoing channel the frames sent and the put's block counter, per incoming channel
// the frames taken, and the connector's `failed` word; all zero at creation.
class DeviceCounters {
public:
    static core::Result<std::unique_ptr<DeviceCounters>> create(uint32_t num_out, uint32_t num_in, int gpu);
    ~DeviceCounters();
    DeviceCounters(const DeviceCounters&) = delete;
    DeviceCounters& operator=(const DeviceCounters&) = delete;

    uint64_t* sent(uint32_t out_channel) const;
    unsigned int* ctasDone(uint32_t out_channel) const;
    uint64_t* received(uint32_t in_channel) const;
    uint32_t* failed() const;

private:
    DeviceCounters() = default;
    uint32_t num_out_ = 0;
    uint32_t num_in_ = 0;
    int gpu_ = 0;
    void* base_ = nullptr;
};

// One abort word per peer and the error record. The abort words live in host memory (set from any thread) and are
// mirrored into device memory, which the kernels read (a host-mapped read costs a PCIe round trip on every put); the
// error record is host-mapped (the device writes it, the host reads it after a sync).
class HostSignals {
public:
    static core::Result<std::unique_ptr<HostSignals>> create(uint32_t num_peers, int gpu);
    ~HostSignals();
    HostSignals(const HostSignals&) = delete;
    HostSignals& operator=(const HostSignals&) = delete;

    // The device's view (pointers kernels take): the mirror in device memory.
    const uint32_t* abortWord(uint32_t peer) const;
    IpcDeviceError* error() const;
    // Host side: sets a peer's abort word (any thread; the first reason stays; copied into the device mirror through
    // a stream of its own before it returns) and reads the error record.
    void abort(uint32_t peer, IpcAbortReason reason);
    void abortAll(IpcAbortReason reason);
    uint32_t abortReason(uint32_t peer) const;
    IpcDeviceError readError() const;

private:
    HostSignals() = default;
    uint32_t num_peers_ = 0;
    int gpu_ = 0;
    void* host_ = nullptr;    // cudaHostAlloc'd: [num_peers] u32 abort words, then the IpcDeviceError (aligned)
    void* device_ = nullptr;  // its device address
    void* mirror_ = nullptr;  // cudaMalloc'd [num_peers] u32: the abort words as the kernels read them
    void* stream_ = nullptr;  // cudaStream_t of the mirror's copies
    std::mutex mutex_;        // serialises abort() calls (the watchdog, cancel())
};

}  // namespace afd::transport::cuda_ipc
