// The FFN face over TCP. It never reads ahead: receiveStep() and receive() read exactly one frame from each
// active peer, and send() only writes, so a peer's next frames wait in the kernel until they are asked for (see
// tcp_attention_connector.h for why that cannot deadlock).
//
// Buffers: one per (stage, peer) of receiveBufferBytes(limits), allocated on first use.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "transport/connector.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_link.h"

namespace afd::transport::tcp {

class TcpFfnConnector final : public FfnConnector {
public:
    // `links[i]` is the connection of attention rank options.peers[i]. `rendezvous` keeps the store up on the
    // rank that hosts it, and this rank's claim and records on it, for as long as the connector lives.
    TcpFfnConnector(const TcpConnectorOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                    std::vector<std::unique_ptr<TcpLink>> links, std::unique_ptr<Canceller> cancel);
    ~TcpFfnConnector() override;

    std::span<const PeerInfo> peers() const override { return peers_; }
    core::Result<StepInfo> receiveStep() override;
    core::Result<std::span<const ReceivedFrame>> receive(const FrameKey& key, const FrameSpec& expected) override;
    core::Status send(const FrameKey& key, std::span<const FramePayload> payloads) override;
    void cancel() override;
    void close() override;

private:
    core::Status usable() const;
    core::Status sticky(core::Status status);
    // Drives the active links until (this->*done)() holds; describe() names what was awaited and (this->*owes)(i)
    // whether link_ptrs_[i] is still owed (for errors only).
    template <typename Describe>
    core::Status pump(Deadline deadline, bool (TcpFfnConnector::*done)() const,
                      bool (TcpFfnConnector::*owes)(size_t) const, Describe describe);
    bool allActiveHaveFrames() const;
    bool anyActiveHasFrame() const;
    bool noneSending() const;
    // Owed by active link i: the frame being received; the bytes being sent.
    bool owesFrame(size_t i) const { return !link_ptrs_[i]->hasFrame(); }
    bool owesBytes(size_t i) const { return link_ptrs_[i]->sending(); }

    int rank_ = 0;
    FrameLimits limits_;
    std::chrono::milliseconds step_timeout_;
    std::unique_ptr<Rendezvous> rendezvous_;
    std::unique_ptr<Canceller> cancel_;
    std::vector<PeerInfo> peers_;
    std::vector<std::unique_ptr<TcpLink>> links_;
    std::vector<TcpLink*> link_ptrs_;  // the links of active peers
    std::vector<bool> active_;
    std::vector<std::array<RecvBuffer, kMaxStages>> buffers_;  // [peer][stage]
    std::array<std::vector<ReceivedFrame>, kMaxStages> results_;
    PollSet poll_set_;
    core::Status error_;  // the first failure; every later call returns it
    bool closed_ = false;
};

}  // namespace afd::transport::tcp
