// NcclEndpoint: the nccl connector's data plane on one rank: its receive slots, send headers and device counters, the
// host-mapped words the header checks write, and the posts over device tensors on a caller's stream, through the
// rank's communicators (nccl_comms.h). It has no thread of its own; the monitor (nccl_monitor.h) watches it.
//
// Memory, on the rank's GPU, allocated once: per (stage, peer) one receive slot (nccl_layout.h) for a frame of the
// receive spec at max_rows rows, and one 16-byte send header. The views a wait hands out point into the slots, valid
// for work enqueued after the wait on its stream and until the next post of the same stage.
//
// Order: a frame to a peer is its header, then one transfer per non-empty segment; the peer's matching wait receives
// them in the same order, and NCCL pairs the transfers of two ranks in the order each posts them. Posts of one stage
// come on one stream (the next post of a stage rewrites its send header). One thread at a time, except the accessors
// marked "any thread".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/connector.h"
#include "transport/nccl/nccl_comms.h"
#include "transport/nccl/nccl_layout.h"

namespace afd::transport::nccl {

struct NcclEndpointSetup {
    int gpu = 0;
    uint32_t max_rows = 0;        // rows of any frame (afd.max_num_tokens)
    FrameSpec out_spec;           // what this rank sends
    FrameSpec in_spec;            // what this rank receives
    std::vector<int> peer_ranks;  // the communicator rank of each peer, in peers() order (a rank's own: a self-loop)
};

// One device allocation, freed on destruction (its GPU made current for the free).
class DeviceAllocation {
public:
    static core::Result<DeviceAllocation> zeroed(size_t bytes, int gpu);
    DeviceAllocation() = default;
    ~DeviceAllocation();
    DeviceAllocation(DeviceAllocation&& other) noexcept;
    DeviceAllocation& operator=(DeviceAllocation&& other) noexcept;
    uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

private:
    void* ptr_ = nullptr;
    int gpu_ = 0;
};

// Pinned host memory mapped into the device (cudaHostAllocMapped), zeroed; freed on destruction.
class HostMappedAllocation {
public:
    static core::Result<HostMappedAllocation> zeroed(size_t bytes, int gpu);
    HostMappedAllocation() = default;
    ~HostMappedAllocation();
    HostMappedAllocation(HostMappedAllocation&& other) noexcept;
    HostMappedAllocation& operator=(HostMappedAllocation&& other) noexcept;
    uint8_t* host() const { return static_cast<uint8_t*>(host_); }
    uint8_t* device() const { return static_cast<uint8_t*>(device_); }

private:
    void* host_ = nullptr;
    void* device_ = nullptr;
};

class NcclEndpoint {
public:
    // What one post sends: payloads[i] (device tensors of the send spec) to peer i where send[i].
    struct Outgoing {
        std::span<const FramePayload> payloads;
        std::span<const bool> send;
    };
    // What one post receives: a frame of `expected` (the receive spec) with rows[i] rows from peer i where take[i];
    // `frames` gets one entry per peer (inactive where !take[i]) with views into the slots.
    struct Incoming {
        const FrameSpec* expected = nullptr;
        std::span<const bool> take;
        std::span<const uint32_t> rows;
        std::vector<ReceivedFrame>* frames = nullptr;
    };

    // Allocates the slots, headers, counters and host-mapped words on setup.gpu; the communicators come with attach().
    static core::Result<std::unique_ptr<NcclEndpoint>> create(const NcclEndpointSetup& setup);
    ~NcclEndpoint();
    NcclEndpoint(const NcclEndpoint&) = delete;
    NcclEndpoint& operator=(const NcclEndpoint&) = delete;

    // Takes the communicators (one per stage); destroyed (aborted) before the memory they may still write.
    void attach(std::unique_ptr<NcclComms> comms);
    NcclComms& comms() const;
    // The peers' names for messages, in peers() order (until set, peers are named by communicator rank).
    void setPeers(std::vector<PeerInfo> peers);
    size_t numPeers() const { return setup_.peer_ranks.size(); }
    std::string describePeer(size_t peer) const;

    // A 16-byte exchange both ways with every peer on every communicator, waited for: NCCL connects a pair of ranks at
    // their first transfer, so this makes every connection before a step (or a graph capture) needs it. Bounded by
    // `timeout` (kTimeout; the communicators are then aborted).
    core::Status warmUp(std::chrono::milliseconds timeout);

    // One group on the communicator of key.stage: the outgoing frames (header writes, then the transfers), the incoming
    // transfers, then the check of the received headers. Either may be null. kInvalidArgument for payloads that break
    // the specs or rows above max_rows; NCCL errors as NcclComms::post.
    core::Status post(const FrameKey& key, const Outgoing* out, const Incoming* in, void* stream);
    core::Status postFrames(const FrameKey& key, std::span<const FramePayload> payloads, std::span<const bool> send,
                            void* stream);
    core::Status postWaits(const FrameKey& key, const FrameSpec& expected, std::span<const bool> take,
                           std::span<const uint32_t> rows, void* stream, std::vector<ReceivedFrame>& frames);

    // Any thread: the first header mismatch a check recorded (kCorrupt naming the peer and both headers), ok when none.
    // Meaningful for checks that have run (after a stream synchronisation; a monitor may poll it any time).
    core::Status headerStatus() const;
    // Any thread: frames checked from `peer` so far (host-mapped, updated by the device as checks run).
    uint64_t framesTaken(size_t peer) const;
    // Any thread: from now on the checks record nothing (the connector failed: headers of aborted transfers are
    // garbage).
    void markFailed();

private:
    NcclEndpoint() = default;
    core::Status checkPayload(size_t peer, const FramePayload& payload) const;
    uint8_t* slot(uint32_t stage, size_t peer) const;
    uint8_t* sendHeader(uint32_t stage, size_t peer) const;
    void launchHeaderWrites(const FrameKey& key, const Outgoing& out, void* stream) const;
    void launchHeaderChecks(const FrameKey& key, const Incoming& in, void* stream) const;

    NcclEndpointSetup setup_;
    NcclSlotLayout out_layout_;
    NcclSlotLayout in_layout_;
    DeviceAllocation slots_;     // [kMaxStages][peers] slots of in_layout_.bytes
    DeviceAllocation headers_;   // [kMaxStages][peers] send headers
    DeviceAllocation counters_;  // the claimed word, then [peers] frames checked
    HostMappedAllocation host_;  // the error record, the failed word, then [peers] frames checked (host copy)
    std::vector<PeerInfo> peers_;
    std::vector<NcclTransfer> transfers_;  // reused by every post
    // NOTE: declared last: destroyed (aborted) first, before the memory its kernels may still touch.
    std::unique_ptr<NcclComms> comms_;
};

}  // namespace afd::transport::nccl
