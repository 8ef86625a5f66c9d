#include "transport/tcp/tcp_ffn_connector.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/logging.h"

namespace afd::transport::tcp {
namespace {

std::string describeStep(const FrameHeader& h) {
    return fmt::format("step {} (flags {}, {} stage{})", h.step, stepFlagsToString(h.flags), h.stage,
                       h.stage == 1 ? "" : "s");
}

}  // namespace

TcpFfnConnector::TcpFfnConnector(const TcpConnectorOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                                 std::vector<std::unique_ptr<TcpLink>> links, std::unique_ptr<Canceller> cancel)
    : rank_(options.rank),
      limits_{options.max_rows, options.max_frame_bytes},
      step_timeout_(options.step_timeout),
      rendezvous_(std::move(rendezvous)),
      cancel_(std::move(cancel)),
      links_(std::move(links)),
      active_(links_.size(), true),
      buffers_(links_.size()) {
    AFD_CHECK(cancel_ != nullptr, "ffn connector without a canceller");
    for (const auto& link : links_) {
        peers_.push_back(link->peer());
        link_ptrs_.push_back(link.get());
    }
    for (auto& results : results_) results.resize(links_.size());
}

TcpFfnConnector::~TcpFfnConnector() { close(); }

core::Status TcpFfnConnector::sticky(core::Status status) {
    if (!status.isOk() && error_.isOk()) error_ = status;
    return status;
}

core::Status TcpFfnConnector::usable() const {
    if (closed_) return core::invalidArgument("ffn connector used after close()");
    return error_;
}

bool TcpFfnConnector::allActiveHaveFrames() const {
    for (const TcpLink* link : link_ptrs_) {
        if (!link->hasFrame()) return false;
    }
    return true;
}

bool TcpFfnConnector::anyActiveHasFrame() const {
    for (const TcpLink* link : link_ptrs_) {
        if (link->hasFrame()) return true;
    }
    return false;
}

bool TcpFfnConnector::noneSending() const {
    for (const TcpLink* link : link_ptrs_) {
        if (link->sending()) return false;
    }
    return true;
}

template <typename Describe>
core::Status TcpFfnConnector::pump(Deadline deadline, bool (TcpFfnConnector::*done)() const,
                                   bool (TcpFfnConnector::*owes)(size_t) const, Describe describe) {
    // NOTE: watch_idle off: an idle link may hold the peer's next frame, which belongs to a later call.
    return sticky(pumpLinks(
        link_ptrs_, deadline, cancel_.get(), /*watch_idle=*/false, poll_set_, [this, done] { return (this->*done)(); },
        [this, owes](size_t i) { return (this->*owes)(i); }, [](size_t) { return core::Status::ok(); }, describe));
}

core::Result<StepInfo> TcpFfnConnector::receiveStep() {
    AFD_RETURN_IF_ERROR(usable());
    StepInfo info;
    if (link_ptrs_.empty()) {
        info.all_left = true;
        return info;
    }
    ReadExpectation expectation;
    expectation.kind = FrameKind::kStep;
    for (TcpLink* link : link_ptrs_) link->expect(expectation);
    // Idle: no deadline until the first header; then the others are part of the step and bounded.
    AFD_RETURN_IF_ERROR(pump(kNoDeadline, &TcpFfnConnector::anyActiveHasFrame, &TcpFfnConnector::owesFrame,
                             [] { return std::string("waiting for the next step header"); }));
    AFD_RETURN_IF_ERROR(
        pump(deadlineAfter(step_timeout_), &TcpFfnConnector::allActiveHaveFrames, &TcpFfnConnector::owesFrame, [this] {
            for (const TcpLink* link : link_ptrs_) {
                if (link->hasFrame()) {
                    return fmt::format("waiting for the step {} header of every attention peer ({} sent it)",
                                       link->frame().header.step, link->name());
                }
            }
            return std::string("waiting for the step header of every attention peer");
        }));

    info.peers.resize(links_.size());
    const TcpLink* first_link = nullptr;
    FrameHeader first;
    for (size_t p = 0; p < links_.size(); ++p) {
        if (!active_[p]) continue;
        TcpLink& link = *links_[p];
        const FrameHeader header = link.frame().header;
        link.takeFrame();
        if (header.flags & kStepShutdown) {
            AFD_LOG_INFO("ffn rank {}: {} left at step {}", rank_, link.name(), header.step);
            active_[p] = false;
            link.close();
            continue;
        }
        if (first_link == nullptr) {
            first_link = &link;
            first = header;
        } else if (header.step != first.step || header.flags != first.flags || header.stage != first.stage) {
            return sticky(core::mismatch("step header mismatch: {} sent {}, {} sent {}", first_link->name(),
                                         describeStep(first), link.name(), describeStep(header)));
        }
        info.peers[p].active = true;
        info.peers[p].stage_tokens = header.stage_tokens;
    }
    link_ptrs_.clear();
    for (size_t p = 0; p < links_.size(); ++p) {
        if (active_[p]) link_ptrs_.push_back(links_[p].get());
    }
    if (first_link == nullptr) {
        AFD_LOG_INFO("ffn rank {}: every attention peer has left", rank_);
        StepInfo left;
        left.all_left = true;
        return left;
    }
    info.step = first.step;
    info.flags = first.flags;
    info.num_stages = first.stage;
    return info;
}

core::Result<std::span<const ReceivedFrame>> TcpFfnConnector::receive(const FrameKey& key, const FrameSpec& expected) {
    AFD_RETURN_IF_ERROR(usable());
    if (key.stage >= kMaxStages) {
        return core::invalidArgument("receive for layer {} stage {}: stages are 0..{}", key.layer, key.stage,
                                     kMaxStages - 1);
    }
    if (expected.segments.size() > kMaxSegments) {
        return core::invalidArgument("receive for layer {} stage {}: {} segments expected, at most {}", key.layer,
                                     key.stage, expected.segments.size(), kMaxSegments);
    }
    for (size_t p = 0; p < links_.size(); ++p) {
        if (!active_[p]) continue;
        ReadExpectation expectation;
        expectation.kind = FrameKind::kA2f;
        expectation.key = key;
        expectation.spec = &expected;
        expectation.buffer = buffers_[p][key.stage].ensure(receiveBufferBytes(limits_));
        links_[p]->expect(expectation);
    }
    AFD_RETURN_IF_ERROR(
        pump(deadlineAfter(step_timeout_), &TcpFfnConnector::allActiveHaveFrames, &TcpFfnConnector::owesFrame, [&key] {
            return fmt::format("waiting for a2f frames of step {} layer {} stage {}", key.step, key.layer, key.stage);
        }));
    std::vector<ReceivedFrame>& results = results_[key.stage];
    for (size_t p = 0; p < links_.size(); ++p) {
        if (!active_[p]) {
            results[p] = ReceivedFrame();
            results[p].active = false;
            continue;
        }
        results[p] = viewFrame(links_[p]->frame());
        links_[p]->takeFrame();
    }
    return std::span<const ReceivedFrame>(results);
}

core::Status TcpFfnConnector::send(const FrameKey& key, std::span<const FramePayload> payloads) {
    AFD_RETURN_IF_ERROR(usable());
    if (key.stage >= kMaxStages) {
        return core::invalidArgument("send for layer {} stage {}: stages are 0..{}", key.layer, key.stage,
                                     kMaxStages - 1);
    }
    if (payloads.size() != links_.size()) {
        return core::invalidArgument("send for layer {} stage {}: {} payloads for {} attention peers", key.layer,
                                     key.stage, payloads.size(), links_.size());
    }
    for (size_t p = 0; p < links_.size(); ++p) {
        if (active_[p]) {
            AFD_RETURN_IF_ERROR(checkPayload(links_[p]->name(), FrameKind::kF2a, key, payloads[p], limits_));
        }
    }
    for (size_t p = 0; p < links_.size(); ++p) {
        if (active_[p]) startPayload(*links_[p], FrameKind::kF2a, key, payloads[p]);
    }
    return pump(deadlineAfter(step_timeout_), &TcpFfnConnector::noneSending, &TcpFfnConnector::owesBytes, [&key] {
        return fmt::format("sending f2a frames of step {} layer {} stage {}", key.step, key.layer, key.stage);
    });
}

void TcpFfnConnector::cancel() { cancel_->cancel(); }

void TcpFfnConnector::close() {
    if (closed_) return;
    closed_ = true;
    for (auto& link : links_) link->close();
    rendezvous_.reset();
}

}  // namespace afd::transport::tcp
