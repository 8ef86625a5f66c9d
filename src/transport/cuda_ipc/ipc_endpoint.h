// IpcEndpoint: what both faces of the cuda_ipc connector share: this rank's inbox and counters, its peers' inboxes,
// the host-mapped signals, the watchdog on the control connections, and the two posts (a frame to peers, a wait for
// frames from peers) over device tensors on a caller's stream.
//
// Channels: this rank is sender `sender_index[i]` in peer i's inbox and peer i is sender i in this rank's inbox;
// outgoing channel (stage, i) and incoming channel (stage, i) are numbered stage * num_peers + i in the counters.
// Engine or worker thread only, except abortAll (any thread).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/connector.h"
#include "transport/cuda_ipc/ipc_inbox.h"
#include "transport/peer_watchdog.h"

namespace afd::transport::cuda_ipc {

struct IpcEndpointSetup {
    int gpu = 0;
    uint32_t max_rows = 0;  // rows of any frame (afd.max_num_tokens)
    FrameSpec out_spec;     // what this rank sends
    FrameSpec in_spec;      // what this rank receives
    std::chrono::milliseconds step_timeout{60000};
};

class IpcEndpoint {
public:
    // Allocates the inbox (one sender per peer) and the signals; the peers' inboxes come with connect().
    static core::Result<std::unique_ptr<IpcEndpoint>> create(const IpcEndpointSetup& setup, size_t num_peers);
    ~IpcEndpoint();

    const LocalInbox& inbox() const { return *inbox_; }
    // Opens peer i's inbox from its blob, where this rank is sender `sender_index` of `peer_senders`.
    core::Status openPeer(size_t i, std::string_view blob, uint32_t sender_index, uint32_t peer_senders,
                          std::string_view peer_name);
    // Starts the watchdog on the control connections (fds in peers order) and makes the device counters.
    core::Status connect(std::vector<int> control_fds, std::vector<PeerInfo> peers);

    // Posts one frame for (layer, stage) to each peer i with send[i] (payloads[i]: device tensors of out_spec).
    core::Status postFrames(const FrameKey& key, std::span<const FramePayload> payloads, std::span<const bool> send,
                            void* stream);
    // Posts the wait for one frame of `expected` (it must be in_spec) from each peer i with take[i], of rows[i] rows,
    // and fills frames (one per peer: inactive where !take[i]) with views into the inbox.
    core::Status postWaits(const FrameKey& key, const FrameSpec& expected, std::span<const bool> take,
                           std::span<const uint32_t> rows, void* stream, std::vector<ReceivedFrame>& frames);
    // The first device failure, as a Status naming the peer; ok when none.
    core::Status deviceStatus() const;
    // Ends every device wait posted or to come (cancel, shutdown).
    void abortAll(IpcAbortReason reason) { signals_->abortAll(reason); }
    // Stops the watchdog (before the control connections close).
    void stopWatchdog() { watchdog_.stop(); }
    std::span<const PeerInfo> peers() const { return peers_; }

private:
    IpcEndpoint() = default;
    core::Status checkPayload(size_t peer, const FramePayload& payload) const;

    IpcEndpointSetup setup_;
    SlotLayout out_layout_;
    SlotLayout in_layout_;
    std::unique_ptr<LocalInbox> inbox_;
    std::vector<std::unique_ptr<RemoteInbox>> remotes_;
    std::vector<uint32_t> sender_index_;  // this rank's index in peer i's inbox
    std::vector<uint32_t> peer_senders_;  // the senders peer i's inbox has
    std::unique_ptr<DeviceCounters> counters_;
    std::unique_ptr<HostSignals> signals_;
    std::vector<PeerInfo> peers_;
    PeerWatchdog watchdog_;
};

// The rendezvous blob key of a rank's inbox record.
inline constexpr const char* kInboxBlob = "cuda_ipc/inbox";

}  // namespace afd::transport::cuda_ipc
