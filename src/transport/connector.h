// The two faces of the attention↔FFN data path, implemented by every backend (tcp/, later cuda_ipc/, nccl/).
//
// One step: the attention rank sends every FFN peer a StepHeader; then, for each crossing layer and each stage
// in order, it dispatches one A2F frame to every FFN peer (rows may be 0: lockstep), each FFN rank receives the
// frames of all its active peers, computes, and sends each one F2A frame, which attention combines. An attention
// rank that has finished sends a header with kStepShutdown; the FFN stops expecting it.
//
// Peers are indexed by their position in peers(); every per-peer span (payloads in, frames out) uses that order.
// Frames hold "segments": row-major [rows, cols] tensors of one dtype, all with the frame's `rows`.
//
// Two data planes. A host backend (ConnectorCapabilities::memory == kHost: tcp) moves CPU tensors through
// dispatch/combine and receive/send, each returning once its bytes are out or in. A device backend (kDevice: cuda_ipc)
// moves device tensors through the post* calls, which only enqueue on a CUDA stream: the transfer and the wait for
// the peer's frame happen on the device, in stream order, with the frame's row count carried in band and checked on
// the device, so a layer needs no host synchronisation and the posts may be captured in a CUDA graph. What a device
// wait finds (a peer lost, a timeout, a frame that breaks the protocol) surfaces at deviceStatus(), which the caller
// asks once it has synchronised the stream. The step header always travels on the host (sendStep/receiveStep).
//
// Threads: a connector is used by one thread at a time, except FfnConnector::cancel(), which any thread may call.
// Errors: kPeerLost (a peer closed or reset: named), kTimeout (a bounded wait ran out: the peers still owed are
// named), kCorrupt / kMismatch (a frame broke the protocol: peer and field named), kCancelled, kInvalidArgument
// (the caller passed payloads that break the rules below). After an error the connector is unusable but safe
// to close().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "transport/frame.h"
#include "transport/role.h"

namespace afd::transport {

struct PeerInfo {
    Role role = Role::kAttention;
    int rank = 0;
    std::string address;  // "host:port" of the peer's end of the connection
    // "attention rank 1 (127.0.0.1:40122)": how every message names the peer.
    std::string describe() const;
};

// Outgoing frame to one peer: `rows` and one tensor per segment, each [rows, cols] (the tensor's last
// dimension is cols), contiguous, in memory the backend can read (CPU for tcp). rows may be 0.
struct FramePayload {
    uint32_t rows = 0;
    std::vector<core::Tensor> segments;
};

// Incoming frame from one peer: views [rows, cols] into connector-owned receive buffers. `active` is false for a
// peer that has left (no frame, no segments).
struct ReceivedFrame {
    bool active = true;
    uint32_t rows = 0;
    std::vector<core::Tensor> segments;
};

// What one peer announced for a step.
struct PeerStep {
    bool active = false;  // takes part in this step (it has not left)
    std::array<uint32_t, kMaxStages> stage_tokens{};
};

struct StepInfo {
    bool all_left = false;  // every peer has sent kStepShutdown: no more steps; nothing below is set
    uint64_t step = 0;      // agreed by every active peer
    uint32_t flags = 0;     // agreed by every active peer (StepFlag bits, never kStepShutdown)
    uint32_t num_stages = 0;
    std::vector<PeerStep> peers;  // by peer index
};

// The attention rank's face: talks to its FFN peers (m2n: every FFN rank; p2p: one).
class AttentionConnector {
public:
    virtual ~AttentionConnector() = default;
    AttentionConnector(const AttentionConnector&) = delete;
    AttentionConnector& operator=(const AttentionConnector&) = delete;

    virtual std::span<const PeerInfo> peers() const = 0;

    // Sends `header` to every FFN peer. After a header with kStepShutdown only close() may follow.
    virtual core::Status sendStep(const StepHeader& header) = 0;

    // Sends one A2F frame for `key` to every FFN peer: payloads[i] goes to peers()[i]. Returns once the caller's
    // tensors are no longer read. A stage has at most one dispatch awaiting its combine.
    virtual core::Status dispatch(const FrameKey& key, std::span<const FramePayload> payloads) = 0;

    // Waits (bounded by the step timeout) for the F2A frame of `key` from every FFN peer, checks it against
    // `expected`, and returns one frame per peer. The views stay valid until the next combine of the same stage.
    virtual core::Result<std::span<const ReceivedFrame>> combine(const FrameKey& key, const FrameSpec& expected) = 0;

    // ---- device data plane (kDevice backends; the defaults refuse) ----

    // Enqueues on `stream` (a cudaStream_t) one A2F frame for `key` to every FFN peer: payloads[i] (device tensors on
    // this rank's GPU, read in stream order) goes to peers()[i]. The frame's rows are set when the post runs, so a
    // graph replays it with the rows it was captured with.
    virtual core::Status postDispatch(const FrameKey& key, std::span<const FramePayload> payloads, void* stream);
    // Enqueues on `stream` the wait for the F2A frame of `key` from every FFN peer, which must carry rows[i] rows of
    // `expected` (checked on the device). Returns device views into this rank's receive slots, valid for work
    // enqueued on `stream` after the wait and until the next postCombine of the stage.
    virtual core::Result<std::span<const ReceivedFrame>> postCombine(const FrameKey& key, const FrameSpec& expected,
                                                                     std::span<const uint32_t> rows, void* stream);
    // After the caller has synchronised every stream it posted on: the first error a device wait or post met since
    // the connector was made (kPeerLost naming the peer, kTimeout, kCorrupt), or ok. Once an error is seen the
    // connector is unusable.
    virtual core::Status deviceStatus();

    // Closes every connection. Idempotent.
    virtual void close() = 0;

protected:
    AttentionConnector() = default;
};

// The FFN rank's face: talks to its attention peers (m2n: all; p2p: a contiguous block).
class FfnConnector {
public:
    virtual ~FfnConnector() = default;
    FfnConnector(const FfnConnector&) = delete;
    FfnConnector& operator=(const FfnConnector&) = delete;

    virtual std::span<const PeerInfo> peers() const = 0;

    // Waits for the next step header from every active peer: without a deadline until the first one arrives
    // (cancellable), then bounded by the step timeout. Active peers must agree on step id, flags and number of
    // stages (kMismatch naming both). Peers whose header carries kStepShutdown leave; when no peer is left the
    // result has all_left set.
    virtual core::Result<StepInfo> receiveStep() = 0;

    // Waits (bounded) for the A2F frame of `key` from every active peer; frames[i] is from peers()[i]
    // (inactive for a peer that has left). The views stay valid until the next receive of the same stage.
    virtual core::Result<std::span<const ReceivedFrame>> receive(const FrameKey& key, const FrameSpec& expected) = 0;

    // Sends one F2A frame for `key` to every active peer (payloads of peers that have left are ignored).
    // Returns once the caller's tensors are no longer read.
    virtual core::Status send(const FrameKey& key, std::span<const FramePayload> payloads) = 0;

    // ---- device data plane (kDevice backends; the defaults refuse) ----

    // Enqueues on `stream` the wait for the A2F frame of `key` from every active peer (active[i]; rows may be 0):
    // peer i must send rows[i] rows of `expected` (checked on the device); frames of peers that have left come back
    // inactive. Views as postCombine's.
    virtual core::Result<std::span<const ReceivedFrame>> postReceive(const FrameKey& key, const FrameSpec& expected,
                                                                     std::span<const bool> active,
                                                                     std::span<const uint32_t> rows, void* stream);
    // Enqueues on `stream` one F2A frame for `key` to every active peer (device tensors, read in stream order).
    virtual core::Status postSend(const FrameKey& key, std::span<const FramePayload> payloads,
                                  std::span<const bool> active, void* stream);
    // As AttentionConnector::deviceStatus.
    virtual core::Status deviceStatus();

    // Thread-safe: makes the pending and every later wait return kCancelled (used to stop an idle FFN); device waits
    // posted and not yet passed end too.
    virtual void cancel() = 0;

    // Closes every connection (and the rendezvous store, on the rank that hosts it). Idempotent; call it from
    // the thread that uses the connector, or after that thread has stopped.
    virtual void close() = 0;

protected:
    FfnConnector() = default;
};

}  // namespace afd::transport
