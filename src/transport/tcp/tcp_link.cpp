#include "transport/tcp/tcp_link.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>

#include "core/check.h"

namespace afd::transport::tcp {

uint8_t* RecvBuffer::ensure(size_t capacity) {
    if (storage_.numel() < static_cast<int64_t>(capacity)) {
        storage_ = core::Tensor::empty(core::DType::kU8, {static_cast<int64_t>(capacity)});
    }
    return data();
}

TcpLink::TcpLink(core::UniqueFd fd, PeerInfo peer, FrameLimits limits)
    : fd_(std::move(fd)), peer_(std::move(peer)), name_(peer_.describe()), limits_(limits) {}

core::Status TcpLink::fail(core::Status status) {
    AFD_CHECK(!status.isOk(), "TcpLink::fail with an ok status");
    if (error_.isOk()) error_ = std::move(status);
    fd_.reset();
    armed_ = false;
    iov_index_ = iov_count_;
    return error_;
}

void TcpLink::startSend(const FrameHeader& header, std::span<const SegmentSpec> specs,
                        std::span<const std::span<const uint8_t>> segments) {
    AFD_CHECK(!sending(), "{}: a frame is still being sent", name_);
    AFD_CHECK(specs.size() == header.segment_count && segments.size() == specs.size(),
              "{}: {} specs and {} segments for a header of {} segments", name_, specs.size(), segments.size(),
              header.segment_count);
    send_header_ = encodeHeader(header);
    iov_count_ = 0;
    iov_index_ = 0;
    iov_[iov_count_++] = {send_header_.data(), send_header_.size()};
    if (!specs.empty()) {
        for (size_t i = 0; i < specs.size(); ++i) {
            encodeDescriptor(specs[i], &send_descriptors_[i * kSegmentDescriptorBytes]);
        }
        iov_[iov_count_++] = {send_descriptors_.data(), specs.size() * kSegmentDescriptorBytes};
    }
    for (const auto& bytes : segments) {
        if (bytes.empty()) continue;
        // NOTE: sendmsg never writes through iov_base; the cast only satisfies struct iovec.
        iov_[iov_count_++] = {const_cast<uint8_t*>(bytes.data()), bytes.size()};
    }
}

void TcpLink::expect(const ReadExpectation& expectation) {
    AFD_CHECK(!armed_ && !has_frame_, "{}: armed twice", name_);
    AFD_CHECK(expectation.kind == FrameKind::kStep || expectation.buffer != nullptr, "{}: no receive buffer", name_);
    expectation_ = expectation;
    armed_ = true;
}

short TcpLink::pollEvents(bool watch_idle) const {
    if (!fd_.valid()) return 0;
    short events = 0;
    if (sending()) events |= POLLOUT;
    if (armed_ || watch_idle) events |= POLLIN;
    return events;
}

core::Status TcpLink::onEvents(short revents, bool watch_idle) {
    if (!error_.isOk()) return error_;
    if (!fd_.valid()) return core::Status::ok();
    // NOTE: read before write: once our last bytes are out, the peer may close (after a shutdown header), and
    // an EOF read after that write would be reported as a loss.
    if ((revents & (POLLIN | POLLERR | POLLHUP)) && (armed_ || watch_idle)) AFD_RETURN_IF_ERROR(readSome());
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) && sending() && fd_.valid()) AFD_RETURN_IF_ERROR(writeSome());
    return core::Status::ok();
}

core::Status TcpLink::writeSome() {
    while (sending()) {
        msghdr msg{};
        msg.msg_iov = &iov_[iov_index_];
        msg.msg_iovlen = iov_count_ - iov_index_;
        const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            const int error = errno;
            if (error == EINTR) continue;
            if (error == EAGAIN || error == EWOULDBLOCK) return core::Status::ok();
            if (error == EPIPE || error == ECONNRESET) return fail(core::peerLost("{} closed the connection", name_));
            return fail(core::ioError("sending to {}: {}", name_, errnoText(error)));
        }
        size_t left = static_cast<size_t>(n);
        while (left > 0) {
            iovec& v = iov_[iov_index_];
            if (left >= v.iov_len) {
                left -= v.iov_len;
                ++iov_index_;
            } else {
                v.iov_base = static_cast<uint8_t*>(v.iov_base) + left;
                v.iov_len -= left;
                left = 0;
            }
        }
    }
    return core::Status::ok();
}

core::Status TcpLink::eofError() const {
    if (frame_bytes_ == 0) return core::peerLost("{} closed the connection", name_);
    return core::peerLost("{} closed the connection in the middle of a frame ({} bytes of it received)", name_,
                          frame_bytes_);
}

core::Status TcpLink::readSome() {
    while (fd_.valid()) {
        uint8_t* dest = nullptr;
        size_t want = 0;
        switch (phase_) {
            case Phase::kHeader:
                dest = recv_header_.data() + phase_done_;
                want = kFrameHeaderBytes - phase_done_;
                break;
            case Phase::kDescriptors:
                dest = recv_descriptors_.data() + phase_done_;
                want = frame_.header.segment_count * kSegmentDescriptorBytes - phase_done_;
                break;
            case Phase::kPayload:
                dest = expectation_.buffer + frame_.layout.offsets[segment_] + phase_done_;
                want = frame_.layout.bytes[segment_] - phase_done_;
                break;
        }
        const ssize_t n = ::recv(fd_.get(), dest, want, MSG_DONTWAIT);
        if (n == 0) return fail(eofError());
        if (n < 0) {
            const int error = errno;
            if (error == EINTR) continue;
            if (error == EAGAIN || error == EWOULDBLOCK) return core::Status::ok();
            if (error == ECONNRESET) return fail(core::peerLost("{} reset the connection", name_));
            return fail(core::ioError("receiving from {}: {}", name_, errnoText(error)));
        }
        phase_done_ += static_cast<size_t>(n);
        frame_bytes_ += static_cast<size_t>(n);
        if (static_cast<size_t>(n) < want) continue;
        phase_done_ = 0;
        switch (phase_) {
            case Phase::kHeader:
                AFD_RETURN_IF_ERROR(onHeader());
                break;
            case Phase::kDescriptors:
                AFD_RETURN_IF_ERROR(onDescriptors());
                break;
            case Phase::kPayload:
                ++segment_;
                advancePayload();
                break;
        }
        // NOTE: stop at the end of the frame; the next frame's bytes stay in the socket until asked for.
        if (has_frame_) return core::Status::ok();
    }
    return core::Status::ok();
}

core::Status TcpLink::onHeader() {
    core::Result<FrameHeader> header = decodeHeader(recv_header_, limits_, name_);
    if (!header.isOk()) return fail(header.status());
    frame_ = IncomingFrame{};
    frame_.header = *header;
    if (!armed_) {
        return fail(core::corrupt("{}: unexpected {} frame (step {} layer {} stage {}) while no frame was due", name_,
                                  frameKindName(header->kind), header->step, header->layer, header->stage));
    }
    if (expectation_.kind == FrameKind::kStep) {
        if (header->kind != FrameKind::kStep) {
            return fail(core::mismatch("{}: {} frame for step {} layer {} stage {}, expected a step header", name_,
                                       frameKindName(header->kind), header->step, header->layer, header->stage));
        }
        has_frame_ = true;
        armed_ = false;
        frame_bytes_ = 0;
        return core::Status::ok();
    }
    core::Status key = checkDataFrameKey(*header, expectation_.kind, expectation_.key, name_);
    if (!key.isOk()) return fail(std::move(key));
    phase_ = Phase::kDescriptors;
    if (header->segment_count == 0) return onDescriptors();
    return core::Status::ok();
}

core::Status TcpLink::onDescriptors() {
    const size_t bytes = frame_.header.segment_count * kSegmentDescriptorBytes;
    core::Result<SegmentLayout> layout =
        decodeSegments(frame_.header, std::span<const uint8_t>(recv_descriptors_.data(), bytes), name_);
    if (!layout.isOk()) return fail(layout.status());
    if (expectation_.spec != nullptr) {
        core::Status checked = checkSegments(frame_.header, *layout, *expectation_.spec, name_);
        if (!checked.isOk()) return fail(std::move(checked));
    }
    AFD_CHECK(layout->extent() <= receiveBufferBytes(limits_), "{}: layout of {} bytes exceeds the buffer", name_,
              layout->extent());
    frame_.layout = *layout;
    frame_.buffer = expectation_.buffer;
    phase_ = Phase::kPayload;
    segment_ = 0;
    advancePayload();
    return core::Status::ok();
}

void TcpLink::advancePayload() {
    while (segment_ < frame_.layout.count && frame_.layout.bytes[segment_] == 0) ++segment_;
    if (segment_ < frame_.layout.count) return;
    phase_ = Phase::kHeader;
    has_frame_ = true;
    armed_ = false;
    frame_bytes_ = 0;
}

core::Status pollOnce(std::span<TcpLink* const> links, Deadline deadline, const Canceller* cancel, bool watch_idle,
                      PollSet& set, bool* own_error) {
    set.fds.clear();
    set.link_of.clear();
    set.completed.clear();
    set.fds.push_back({cancel != nullptr ? cancel->fd() : -1, POLLIN, 0});
    for (size_t i = 0; i < links.size(); ++i) {
        if (!links[i]->error().isOk()) return links[i]->error();
        const short events = links[i]->pollEvents(watch_idle);
        if (events == 0) continue;
        set.fds.push_back({links[i]->fd(), events, 0});
        set.link_of.push_back(i);
    }
    AFD_CHECK(!set.link_of.empty(), "waiting with no link to wait on");
    int rc = 0;
    do {
        rc = ::poll(set.fds.data(), set.fds.size(), pollTimeoutMs(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        *own_error = true;
        return core::ioError("poll(): {}", errnoText(errno));
    }
    if (set.fds[0].revents != 0) {
        *own_error = true;
        return core::Status(core::StatusCode::kCancelled, "cancelled");
    }
    if (rc == 0) {
        *own_error = true;
        return core::timeoutError("timed out");
    }
    for (size_t k = 0; k < set.link_of.size(); ++k) {
        const short revents = set.fds[k + 1].revents;
        if (revents == 0) continue;
        TcpLink& link = *links[set.link_of[k]];
        const bool had_frame = link.hasFrame();
        AFD_RETURN_IF_ERROR(link.onEvents(revents, watch_idle));
        if (!had_frame && link.hasFrame()) set.completed.push_back(set.link_of[k]);
    }
    return core::Status::ok();
}

core::Status timeoutOwing(Clock::duration waited, std::span<const std::string_view> owed) {
    const std::string waited_text = formatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(waited));
    // NOTE: a pump only times out while done() is false, so some peer owes something; the fallback is for a
    // caller whose owes() and done() disagree.
    if (owed.empty()) return core::timeoutError("timed out after {} (no peer owed anything)", waited_text);
    return core::timeoutError("timed out after {} waiting on {}", waited_text, fmt::join(owed, ", "));
}

core::Status checkPayload(std::string_view peer, FrameKind kind, const FrameKey& key, const FramePayload& payload,
                          const FrameLimits& limits) {
    const std::string_view kind_name = frameKindName(kind);
    if (payload.rows > limits.max_rows) {
        return core::invalidArgument(
            "{} frame to {} for layer {} stage {}: {} rows, at most {} (the limit agreed with it at the handshake, "
            "from afd.max_num_tokens); nothing was sent",
            kind_name, peer, key.layer, key.stage, payload.rows, limits.max_rows);
    }
    if (payload.segments.size() > kMaxSegments) {
        return core::invalidArgument("{} frame to {} for layer {} stage {}: {} segments, at most {}", kind_name, peer,
                                     key.layer, key.stage, payload.segments.size(), kMaxSegments);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < payload.segments.size(); ++i) {
        const core::Tensor& t = payload.segments[i];
        if (!t.device().isCpu() || t.dim() != 2 || t.size(0) != payload.rows || t.size(1) < 1 ||
            t.size(1) > static_cast<int64_t>(UINT32_MAX) || (t.nbytes() > 0 && t.rawData() == nullptr)) {
            return core::invalidArgument(
                "{} frame to {} for layer {} stage {}: segment {} is {} {} on {}, expected "
                "a CPU tensor [{}, cols]",
                kind_name, peer, key.layer, key.stage, i, core::shapeToString(t.shape()), core::dtypeName(t.dtype()),
                t.device().toString(), payload.rows);
        }
        total += t.nbytes();
    }
    if (total > limits.max_frame_bytes) {
        return core::invalidArgument(
            "{} frame to {} for layer {} stage {}: {} payload bytes, at most {} (the limit agreed with it at the "
            "handshake, from afd.max_num_tokens and the frame widths); nothing was sent",
            kind_name, peer, key.layer, key.stage, total, limits.max_frame_bytes);
    }
    return core::Status::ok();
}

void startPayload(TcpLink& link, FrameKind kind, const FrameKey& key, const FramePayload& payload) {
    std::array<SegmentSpec, kMaxSegments> specs{};
    std::array<std::span<const uint8_t>, kMaxSegments> bytes{};
    const size_t count = payload.segments.size();
    AFD_CHECK(count <= kMaxSegments, "{} segments (at most {})", count, kMaxSegments);
    for (size_t i = 0; i < count; ++i) {
        const core::Tensor& t = payload.segments[i];
        specs[i] = {t.dtype(), static_cast<uint32_t>(t.size(1))};
        bytes[i] = std::span<const uint8_t>(static_cast<const uint8_t*>(t.rawData()), t.nbytes());
    }
    const FrameHeader header = makeDataHeader(kind, key, payload.rows, std::span(specs.data(), count));
    link.startSend(header, std::span(specs.data(), count), std::span(bytes.data(), count));
}

ReceivedFrame viewFrame(const IncomingFrame& frame) {
    ReceivedFrame out;
    out.active = true;
    out.rows = frame.header.rows;
    out.segments.reserve(frame.layout.count);
    for (uint32_t i = 0; i < frame.layout.count; ++i) {
        const SegmentSpec& s = frame.layout.segments[i];
        out.segments.push_back(core::Tensor::view(frame.buffer + frame.layout.offsets[i], s.dtype,
                                                  {static_cast<int64_t>(frame.header.rows), s.cols}));
    }
    return out;
}

}  // namespace afd::transport::tcp
