// The attention face over TCP.
//
// Why no exchange deadlocks: an FFN rank reads every active peer at once in receiveStep() and receive(), and
// blocks on writes only in send(). Every call of this connector (sendStep, dispatch, combine) polls every FFN
// link for input and reads any F2A frame that is due while it writes. So an FFN rank blocked in send() to this
// rank progresses whenever this rank is inside the connector (and outside it, this rank only computes, which
// ends); and this rank, blocked writing to an FFN rank, progresses once that rank is back in receive(), which
// it reaches as soon as its own send() drains. Nothing assumes frames fit in socket buffers; the argument holds
// for any number of attention and FFN ranks and with two stages in flight.
//
// Buffers: two per (stage, peer) of receiveBufferBytes(limits) each, allocated on first use: an F2A frame read
// early (during a dispatch) lands in the one that does not hold the views returned by the previous combine of
// that stage, so those views stay valid until the next combine of the stage, as the face promises.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "transport/connector.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_link.h"

namespace afd::transport::tcp {

class TcpAttentionConnector final : public AttentionConnector {
public:
    // `links[i]` is the connection to FFN rank options.peers[i]. `rendezvous` holds this rank's claim and records on
    // the store for as long as the connector lives (a second process claiming the rank meanwhile is refused).
    TcpAttentionConnector(const TcpConnectorOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                          std::vector<std::unique_ptr<TcpLink>> links);
    ~TcpAttentionConnector() override;

    std::span<const PeerInfo> peers() const override { return peers_; }
    core::Status sendStep(const StepHeader& header) override;
    core::Status dispatch(const FrameKey& key, std::span<const FramePayload> payloads) override;
    core::Result<std::span<const ReceivedFrame>> combine(const FrameKey& key, const FrameSpec& expected) override;
    void close() override;

private:
    struct Slot {
        std::array<RecvBuffer, 2> buffers;
        int next = 0;        // buffer the next frame lands in
        bool ready = false;  // `frame` holds the F2A frame of the stage's in-flight dispatch
        IncomingFrame frame;
    };
    struct StageState {
        bool in_flight = false;  // dispatched, not combined yet
        FrameKey key;
    };
    // F2A frames a link still owes, in the order they were dispatched (≤ one per stage).
    struct Owed {
        std::array<FrameKey, kMaxStages> keys{};
        size_t count = 0;
    };

    core::Status usable() const;
    void armNext(size_t peer);
    core::Status onFrame(size_t peer);
    bool noneSending() const;
    // Drives the links until done(); on a timeout the error names the peers p for which owes(p) holds.
    template <typename Done, typename Owes, typename Describe>
    core::Status pump(Done done, Owes owes, Describe describe);
    // owes() of a pump that waits for the sockets to take what is being sent.
    bool stillSending(size_t peer) const { return links_[peer]->sending(); }
    core::Status sticky(core::Status status);

    int rank_ = 0;
    FrameLimits limits_;
    std::chrono::milliseconds step_timeout_;
    std::unique_ptr<Rendezvous> rendezvous_;
    std::vector<PeerInfo> peers_;
    std::vector<std::unique_ptr<TcpLink>> links_;
    std::vector<TcpLink*> link_ptrs_;
    std::vector<std::array<Slot, kMaxStages>> slots_;  // [peer][stage]
    std::vector<Owed> owed_;                           // [peer]
    std::array<StageState, kMaxStages> stages_{};
    std::array<std::vector<ReceivedFrame>, kMaxStages> results_;
    PollSet poll_set_;
    core::Status error_;  // the first failure; every later call returns it
    bool shut_down_ = false;
    bool closed_ = false;
};

}  // namespace afd::transport::tcp
