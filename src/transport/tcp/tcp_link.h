// One peer connection of the tcp backend and the poll loop that drives many of them at once.
//
// A TcpLink owns a non-blocking socket with at most one outgoing and one incoming frame in progress. It never
// reads past the frame it was told to expect, so bytes of the peer's next frame stay in the kernel until the
// owner asks for them. pumpLinks() polls every link (and a Canceller) and moves bytes whichever way the socket
// allows, so that no two ranks wait on each other's writes (see tcp_attention_connector.h for the argument).
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/unique_fd.h"
#include "transport/connector.h"
#include "transport/frame.h"
#include "transport/socket.h"

namespace afd::transport::tcp {

// A receive buffer of fixed capacity (receiveBufferBytes of the limits), 64-byte aligned, allocated on first use.
class RecvBuffer {
public:
    uint8_t* ensure(size_t capacity);
    uint8_t* data() const { return static_cast<uint8_t*>(storage_.rawData()); }

private:
    core::Tensor storage_;  // U8 [capacity]
};

// What a link reads next.
struct ReadExpectation {
    FrameKind kind = FrameKind::kStep;  // kStep, kA2f or kF2a
    FrameKey key;                       // data frames only
    const FrameSpec* spec = nullptr;    // data frames: checked when the descriptors arrive; null → checked later
    uint8_t* buffer = nullptr;          // data frames: receives the payload (receiveBufferBytes(limits) bytes)
};

// A frame read completely. The payload lies in the expectation's buffer at layout.offsets.
struct IncomingFrame {
    FrameHeader header;
    SegmentLayout layout;
    uint8_t* buffer = nullptr;
};

class TcpLink {
public:
    TcpLink(core::UniqueFd fd, PeerInfo peer, FrameLimits limits);
    TcpLink(const TcpLink&) = delete;
    TcpLink& operator=(const TcpLink&) = delete;

    const PeerInfo& peer() const { return peer_; }
    const std::string& name() const { return name_; }  // PeerInfo::describe()
    bool open() const { return fd_.valid(); }
    int fd() const { return fd_.get(); }
    // The first error of this link; every later operation fails with it.
    const core::Status& error() const { return error_; }
    // Closes the socket (a peer that left, or close()). Idempotent.
    void close() { fd_.reset(); }

    // Starts sending one frame: the header and descriptors are copied, `segments[i]` (bytes of segment i) is
    // read in place and must stay valid until sending() turns false.
    void startSend(const FrameHeader& header, std::span<const SegmentSpec> specs,
                   std::span<const std::span<const uint8_t>> segments);
    bool sending() const { return iov_index_ < iov_count_; }

    // Arms the reader for one frame. Precondition: !expecting() and !hasFrame().
    void expect(const ReadExpectation& expectation);
    bool expecting() const { return armed_; }
    bool hasFrame() const { return has_frame_; }
    const IncomingFrame& frame() const { return frame_; }
    // Hands the completed frame over; the link can be armed again.
    void takeFrame() { has_frame_ = false; }

    // poll() events this link waits for. `watch_idle`: also read when nothing is expected, to report a closed
    // connection or a stray frame at once (only where no frame may legitimately arrive unasked).
    short pollEvents(bool watch_idle) const;
    // Moves bytes after poll() reported `revents`. On failure the link keeps the error and closes.
    core::Status onEvents(short revents, bool watch_idle);

    // Makes the link fail with `status` (e.g. a frame that breaks a rule checked by the owner).
    core::Status fail(core::Status status);

private:
    enum class Phase { kHeader, kDescriptors, kPayload };

    core::Status readSome();
    core::Status writeSome();
    // Called when a phase's bytes are complete; advances the phase or finishes the frame.
    core::Status onHeader();
    core::Status onDescriptors();
    void advancePayload();
    core::Status eofError() const;

    core::UniqueFd fd_;
    PeerInfo peer_;
    std::string name_;
    FrameLimits limits_;
    core::Status error_;

    // Outgoing frame.
    HeaderBytes send_header_{};
    std::array<uint8_t, kMaxSegments * kSegmentDescriptorBytes> send_descriptors_{};
    std::array<struct iovec, 2 + kMaxSegments> iov_{};
    size_t iov_count_ = 0;
    size_t iov_index_ = 0;

    // Incoming frame.
    bool armed_ = false;
    bool has_frame_ = false;
    ReadExpectation expectation_;
    Phase phase_ = Phase::kHeader;
    HeaderBytes recv_header_{};
    std::array<uint8_t, kMaxSegments * kSegmentDescriptorBytes> recv_descriptors_{};
    size_t phase_done_ = 0;   // bytes of the current phase (header, descriptors, current segment) read
    uint32_t segment_ = 0;    // current segment in kPayload
    size_t frame_bytes_ = 0;  // bytes of the current frame read so far (for messages)
    IncomingFrame frame_;
};

// The poll set of one pump: reused between calls to avoid allocating per exchange.
struct PollSet {
    std::vector<pollfd> fds;
    std::vector<size_t> link_of;    // fds[i + 1] belongs to links[link_of[i]]
    std::vector<size_t> completed;  // links that completed a frame in the last round
};

// One round: polls every open link with work (plus `cancel`) until something happens or `deadline`, handles
// the events and lists in set.completed the links that completed a frame. A link's own failure names its peer;
// a timeout (kTimeout "timed out"), a cancellation or a failing poll() set *own_error so that the caller can say
// what it was waiting for and on whom.
core::Status pollOnce(std::span<TcpLink* const> links, Deadline deadline, const Canceller* cancel, bool watch_idle,
                      PollSet& set, bool* own_error);

// kTimeout "timed out after <waited> waiting on <owed, comma-separated>".
core::Status timeoutOwing(Clock::duration waited, std::span<const std::string_view> owed);

// Drives the links until done() returns true; on_frame(i) runs for each completed frame of links[i] (the owner
// takes the frame and may arm the link again) and returns a Status. Errors of any link end the pump. On a timeout
// or cancellation describe() says what was awaited ("waiting for f2a frames of step 3 …"), and a timeout names
// the peers still owed: those i for which owes(i) holds (a frame not yet received from links[i], or bytes not yet
// taken by it), not every link the poll watched: "…: timed out after 300 ms waiting on ffn rank 1 (…)".
template <typename Done, typename Owes, typename OnFrame, typename Describe>
core::Status pumpLinks(std::span<TcpLink* const> links, Deadline deadline, const Canceller* cancel, bool watch_idle,
                       PollSet& set, Done done, Owes owes, OnFrame on_frame, Describe describe) {
    const Clock::time_point start = Clock::now();
    // A first pass without waiting: where input is watched, take what has arrived (a reply, a closed
    // connection); then write what the sockets take, so that a frame that fits the send buffer leaves without
    // a poll. NOTE: reading comes first: a peer may close right after our last frame (a shutdown header), and
    // that is no error.
    for (size_t i = 0; i < links.size(); ++i) {
        TcpLink& link = *links[i];
        if (!link.open()) continue;
        if (watch_idle) {
            const bool had_frame = link.hasFrame();
            AFD_RETURN_IF_ERROR(link.onEvents(POLLIN, watch_idle));
            if (!had_frame && link.hasFrame()) AFD_RETURN_IF_ERROR(on_frame(i));
        }
        if (link.sending()) AFD_RETURN_IF_ERROR(link.onEvents(POLLOUT, /*watch_idle=*/false));
    }
    while (!done()) {
        bool own_error = false;
        core::Status status = pollOnce(links, deadline, cancel, watch_idle, set, &own_error);
        if (!status.isOk()) {
            if (!own_error) return status;
            if (status.code() == core::StatusCode::kTimeout) {
                std::vector<std::string_view> owed;
                for (size_t i = 0; i < links.size(); ++i) {
                    if (owes(i)) owed.push_back(links[i]->name());
                }
                status = timeoutOwing(Clock::now() - start, owed);
            }
            return status.withContext(describe());
        }
        for (size_t i : set.completed) AFD_RETURN_IF_ERROR(on_frame(i));
    }
    return core::Status::ok();
}

// Checks an outgoing `payload` for `peer` before any byte of it is sent: CPU tensors [rows, cols], rows ≤
// limits.max_rows, at most kMaxSegments, payload ≤ limits.max_frame_bytes (the limits agreed with the peer at the
// handshake, which it enforces on receipt). kInvalidArgument naming the peer, the segment or the limit; the
// connection stays in step, so the caller may go on with a valid frame.
core::Status checkPayload(std::string_view peer, FrameKind kind, const FrameKey& key, const FramePayload& payload,
                          const FrameLimits& limits);
// Starts sending `payload` as a `kind` frame for `key`. Precondition: checkPayload() accepted it.
void startPayload(TcpLink& link, FrameKind kind, const FrameKey& key, const FramePayload& payload);

// Views [rows, cols] of every segment of a completed frame.
ReceivedFrame viewFrame(const IncomingFrame& frame);

}  // namespace afd::transport::tcp
