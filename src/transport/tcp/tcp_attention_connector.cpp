#include "transport/tcp/tcp_attention_connector.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/logging.h"

namespace afd::transport::tcp {

TcpAttentionConnector::TcpAttentionConnector(const TcpConnectorOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                                             std::vector<std::unique_ptr<TcpLink>> links)
    : rank_(options.rank),
      limits_{options.max_rows, options.max_frame_bytes},
      step_timeout_(options.step_timeout),
      rendezvous_(std::move(rendezvous)),
      links_(std::move(links)),
      slots_(links_.size()),
      owed_(links_.size()) {
    for (const auto& link : links_) {
        peers_.push_back(link->peer());
        link_ptrs_.push_back(link.get());
    }
    for (auto& results : results_) results.resize(links_.size());
}

TcpAttentionConnector::~TcpAttentionConnector() { close(); }

core::Status TcpAttentionConnector::sticky(core::Status status) {
    if (!status.isOk() && error_.isOk()) error_ = status;
    return status;
}

core::Status TcpAttentionConnector::usable() const {
    if (closed_) return core::invalidArgument("attention connector used after close()");
    if (!error_.isOk()) return error_;
    if (shut_down_) return core::invalidArgument("attention connector used after its shutdown step header");
    return core::Status::ok();
}

template <typename Done, typename Owes, typename Describe>
core::Status TcpAttentionConnector::pump(Done done, Owes owes, Describe describe) {
    // NOTE: watch_idle: no FFN frame may arrive unasked on this side, so input on an idle link (EOF, a stray
    // frame) is an error to report at once.
    return sticky(pumpLinks(
        link_ptrs_, deadlineAfter(step_timeout_), nullptr, /*watch_idle=*/true, poll_set_, done, owes,
        [this](size_t peer) { return onFrame(peer); }, describe));
}

void TcpAttentionConnector::armNext(size_t peer) {
    TcpLink& link = *links_[peer];
    const Owed& owed = owed_[peer];
    if (owed.count == 0 || link.expecting() || link.hasFrame() || !link.open()) return;
    const FrameKey& key = owed.keys[0];
    Slot& slot = slots_[peer][key.stage];
    ReadExpectation expectation;
    expectation.kind = FrameKind::kF2a;
    expectation.key = key;
    expectation.buffer = slot.buffers[slot.next].ensure(receiveBufferBytes(limits_));
    link.expect(expectation);
}

core::Status TcpAttentionConnector::onFrame(size_t peer) {
    TcpLink& link = *links_[peer];
    Owed& owed = owed_[peer];
    AFD_CHECK(owed.count > 0, "{}: a frame arrived while none was owed", link.name());
    Slot& slot = slots_[peer][owed.keys[0].stage];
    slot.frame = link.frame();
    slot.ready = true;
    link.takeFrame();
    for (size_t i = 1; i < owed.count; ++i) owed.keys[i - 1] = owed.keys[i];
    --owed.count;
    armNext(peer);
    return core::Status::ok();
}

core::Status TcpAttentionConnector::sendStep(const StepHeader& header) {
    AFD_RETURN_IF_ERROR(usable());
    if (header.num_stages < 1 || header.num_stages > kMaxStages) {
        return core::invalidArgument("step {} header with {} stages, expected 1..{}", header.step, header.num_stages,
                                     kMaxStages);
    }
    if ((header.flags & ~kKnownStepFlags) != 0) {
        return core::invalidArgument("step {} header with unknown flags 0x{:x}", header.step, header.flags);
    }
    for (uint32_t i = 0; i < kMaxStages; ++i) {
        const uint32_t tokens = header.stage_tokens[i];
        if ((i >= header.num_stages && tokens != 0) || tokens > limits_.max_rows) {
            return core::invalidArgument(
                "step {} header: {} tokens in stage {} (stages {}, at most {} tokens: the limit agreed at the "
                "handshake, from afd.max_num_tokens); nothing was sent",
                header.step, tokens, i, header.num_stages, limits_.max_rows);
        }
    }
    for (uint32_t s = 0; s < kMaxStages; ++s) {
        if (stages_[s].in_flight) {
            return core::invalidArgument("step {} header while layer {} stage {} of step {} awaits its combine",
                                         header.step, stages_[s].key.layer, s, stages_[s].key.step);
        }
    }
    const FrameHeader frame = makeStepHeader(header);
    for (auto& link : links_) link->startSend(frame, {}, {});
    AFD_RETURN_IF_ERROR(pump([this] { return noneSending(); }, [this](size_t p) { return stillSending(p); },
                             [&header] { return fmt::format("sending the step {} header", header.step); }));
    if (header.flags & kStepShutdown) {
        shut_down_ = true;
        AFD_LOG_INFO("attention rank {}: shutdown sent to {} ffn peers at step {}", rank_, links_.size(), header.step);
    }
    return core::Status::ok();
}

core::Status TcpAttentionConnector::dispatch(const FrameKey& key, std::span<const FramePayload> payloads) {
    AFD_RETURN_IF_ERROR(usable());
    if (key.stage >= kMaxStages) {
        return core::invalidArgument("dispatch for layer {} stage {}: stages are 0..{}", key.layer, key.stage,
                                     kMaxStages - 1);
    }
    StageState& stage = stages_[key.stage];
    if (stage.in_flight) {
        return core::invalidArgument("dispatch for step {} layer {} stage {} while layer {} awaits its combine",
                                     key.step, key.layer, key.stage, stage.key.layer);
    }
    if (payloads.size() != links_.size()) {
        return core::invalidArgument("dispatch for layer {} stage {}: {} payloads for {} ffn peers", key.layer,
                                     key.stage, payloads.size(), links_.size());
    }
    for (size_t p = 0; p < links_.size(); ++p) {
        AFD_RETURN_IF_ERROR(checkPayload(links_[p]->name(), FrameKind::kA2f, key, payloads[p], limits_));
    }
    for (size_t p = 0; p < links_.size(); ++p) {
        startPayload(*links_[p], FrameKind::kA2f, key, payloads[p]);
        Owed& owed = owed_[p];
        AFD_CHECK(owed.count < kMaxStages, "{}: more F2A frames owed than stages", links_[p]->name());
        owed.keys[owed.count++] = key;
        armNext(p);
    }
    stage.in_flight = true;
    stage.key = key;
    return pump(
        [this] { return noneSending(); }, [this](size_t p) { return stillSending(p); },
        [&key] { return fmt::format("dispatching step {} layer {} stage {}", key.step, key.layer, key.stage); });
}

core::Result<std::span<const ReceivedFrame>> TcpAttentionConnector::combine(const FrameKey& key,
                                                                            const FrameSpec& expected) {
    AFD_RETURN_IF_ERROR(usable());
    if (key.stage >= kMaxStages || !stages_[key.stage].in_flight || !(stages_[key.stage].key == key)) {
        return core::invalidArgument("combine for step {} layer {} stage {} without a matching dispatch", key.step,
                                     key.layer, key.stage);
    }
    const uint32_t s = key.stage;
    AFD_RETURN_IF_ERROR(pump(
        [this, s] {
            for (const auto& peer_slots : slots_) {
                if (!peer_slots[s].ready) return false;
            }
            return true;
        },
        // Owed: the peers whose frame of this stage has not arrived (one that sent it, or is busy with another
        // stage's, is not named).
        [this, s](size_t p) { return !slots_[p][s].ready; },
        [&key] {
            return fmt::format("waiting for f2a frames of step {} layer {} stage {}", key.step, key.layer, key.stage);
        }));
    std::vector<ReceivedFrame>& results = results_[s];
    for (size_t p = 0; p < links_.size(); ++p) {
        Slot& slot = slots_[p][s];
        const core::Status checked = checkSegments(slot.frame.header, slot.frame.layout, expected, links_[p]->name());
        if (!checked.isOk()) return sticky(links_[p]->fail(checked));
        results[p] = viewFrame(slot.frame);
        slot.ready = false;
        slot.next = 1 - slot.next;
    }
    stages_[s].in_flight = false;
    return std::span<const ReceivedFrame>(results);
}

bool TcpAttentionConnector::noneSending() const {
    for (const auto& link : links_) {
        if (link->sending()) return false;
    }
    return true;
}

void TcpAttentionConnector::close() {
    if (closed_) return;
    closed_ = true;
    for (auto& link : links_) link->close();
    rendezvous_.reset();
}

}  // namespace afd::transport::tcp
