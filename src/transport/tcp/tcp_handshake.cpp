#include "transport/tcp/tcp_handshake.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <memory>

#include "core/logging.h"
#include "transport/frame.h"
#include "transport/rendezvous.h"
#include "transport/wait_progress.h"

namespace afd::transport::tcp {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxPendingConnections = 64;
// How long a rejected peer gets to take our error frame before we close.
constexpr milliseconds kRejectWriteTimeout(1000);

// Control frames carry no data-frame limits: a zero limit rejects any data frame.
constexpr FrameLimits kNoDataLimits{0, 0};

// Where the tcp backend takes the limits from (tcp_backend.cpp), so that a mismatch says what to change.
constexpr std::string_view kMaxRowsSource = "afd.max_num_tokens";
constexpr std::string_view kMaxFrameBytesSource =
    "afd.max_num_tokens rows of the widest frame: the model's hidden_size, and num_experts_per_tok in m2n";

// Empty when `a` and `b` agree; else what differs, with both ranks' values and the config keys behind them.
std::string limitsMismatch(std::string_view a_name, const FrameLimits& a, std::string_view b_name,
                           const FrameLimits& b) {
    std::vector<std::string> parts;
    if (a.max_rows != b.max_rows) {
        parts.push_back(fmt::format("max rows per frame: {} has {}, {} has {} (from {})", a_name, a.max_rows, b_name,
                                    b.max_rows, kMaxRowsSource));
    }
    if (a.max_frame_bytes != b.max_frame_bytes) {
        parts.push_back(fmt::format("max payload bytes per data frame: {} has {}, {} has {} (from {})", a_name,
                                    a.max_frame_bytes, b_name, b.max_frame_bytes, kMaxFrameBytesSource));
    }
    if (parts.empty()) return "";
    return fmt::format("frame limits mismatch: {}", fmt::join(parts, "; "));
}

// A connection that has not completed its hello yet.
struct Pending {
    core::UniqueFd fd;
    std::string address;
    std::array<uint8_t, kFrameHeaderBytes + kMaxControlPayloadBytes> bytes{};
    size_t got = 0;
    size_t need = kFrameHeaderBytes;
    FrameHeader header;
};

std::string peerLabel(const Pending& p) { return fmt::format("connection from {}", p.address); }

void reject(Pending& p, const std::string& text, std::string* last_rejection) {
    AFD_LOG_WARN("rejecting the {}: {}", peerLabel(p), text);
    const std::vector<uint8_t> frame = encodeErrorFrame(text);
    const core::Status sent =
        sendAll(p.fd.get(), frame.data(), frame.size(), deadlineAfter(kRejectWriteTimeout), nullptr, peerLabel(p));
    if (!sent.isOk()) AFD_LOG_DEBUG("error frame not delivered: {}", sent.message());
    *last_rejection = text;
    p.fd.reset();
}

// Checks a complete hello; returns the index into expected_ranks, or an error text for the peer.
core::Result<size_t> checkHello(const Pending& p, std::span<const int> expected_ranks,
                                const std::vector<core::UniqueFd>& accepted, const HandshakeIdentity& self) {
    const std::string me = fmt::format("{} rank {}", roleName(self.role), self.rank);
    AFD_ASSIGN_OR_RETURN(Hello hello, decodeHelloPayload(std::span<const uint8_t>(p.bytes.data() + kFrameHeaderBytes,
                                                                                  p.header.payload_bytes),
                                                         peerLabel(p)));
    const std::string them = fmt::format("{} rank {}", roleName(hello.role), hello.rank);
    if (hello.role != Role::kAttention) {
        return core::mismatch("{} accepts attention ranks only, got a hello from {}", me, them);
    }
    const auto it = std::find(expected_ranks.begin(), expected_ranks.end(), hello.rank);
    if (it == expected_ranks.end()) {
        return core::mismatch("{} does not serve {} (its attention peers are {})", me, them,
                              fmt::join(expected_ranks, ", "));
    }
    const size_t index = static_cast<size_t>(it - expected_ranks.begin());
    if (accepted[index].valid()) return core::mismatch("{} is connected to {} already (duplicate hello)", me, them);
    // Both checked, so that one answer names every difference.
    std::vector<std::string> problems;
    if (std::string limits = limitsMismatch(them, hello.limits, me, self.limits); !limits.empty()) {
        problems.push_back(std::move(limits));
    }
    if (hello.fingerprint != self.fingerprint) {
        problems.push_back(fmt::format("fingerprint mismatch: {} has '{}', {} has '{}'", them, hello.fingerprint, me,
                                       self.fingerprint));
    }
    if (!problems.empty()) return core::mismatch("{}", fmt::join(problems, "; "));
    return index;
}

}  // namespace

core::Result<core::UniqueFd> connectAndHello(const HostPort& endpoint, const PeerInfo& peer,
                                             const HandshakeIdentity& self, Deadline deadline, const Canceller* cancel,
                                             milliseconds report_every) {
    const std::string name = peer.describe();
    AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, connectTcp(endpoint, deadline, cancel, name, report_every));
    const std::vector<uint8_t> hello = encodeHelloFrame(self.role, self.rank, self.fingerprint, self.limits);
    AFD_RETURN_IF_ERROR(sendAll(fd.get(), hello.data(), hello.size(), deadline, cancel, name));
    HeaderBytes head{};
    AFD_RETURN_IF_ERROR(recvAll(fd.get(), head.data(), head.size(), deadline, cancel, name));
    AFD_ASSIGN_OR_RETURN(FrameHeader header, decodeHeader(head, kNoDataLimits, name));
    if (header.kind == FrameKind::kHelloAck) {
        std::array<uint8_t, kHelloAckPayloadBytes> payload{};
        AFD_RETURN_IF_ERROR(recvAll(fd.get(), payload.data(), payload.size(), deadline, cancel, name));
        AFD_ASSIGN_OR_RETURN(const FrameLimits theirs, decodeHelloAckPayload(payload, name));
        // NOTE: an FFN rank of this version refuses other limits before it acknowledges; this guards against
        // one that does not.
        const std::string me = describeRank(self.role, self.rank);
        const std::string limits = limitsMismatch(describeRank(peer.role, peer.rank), theirs, me, self.limits);
        if (!limits.empty()) return core::mismatch("{} acknowledged the hello of {}, but: {}", name, me, limits);
        return fd;
    }
    if (header.kind == FrameKind::kError) {
        std::string text(header.payload_bytes, '\0');
        AFD_RETURN_IF_ERROR(recvAll(fd.get(), text.data(), text.size(), deadline, cancel, name));
        return core::mismatch("{} rejected the hello of {} rank {}: {}", name, roleName(self.role), self.rank, text);
    }
    return core::corrupt("{}: {} frame in answer to a hello", name, frameKindName(header.kind));
}

core::Result<std::vector<core::UniqueFd>> acceptPeers(int listen_fd, std::string_view listen_address,
                                                      std::span<const int> expected_ranks,
                                                      const HandshakeIdentity& self, Deadline deadline,
                                                      const Canceller* cancel, milliseconds report_every) {
    const Clock::time_point start = Clock::now();
    WaitProgress progress(start, deadline, report_every);
    std::vector<core::UniqueFd> accepted(expected_ranks.size());
    size_t num_accepted = 0;
    std::vector<std::unique_ptr<Pending>> pending;
    std::string last_rejection;
    std::vector<pollfd> fds;
    while (num_accepted < expected_ranks.size()) {
        fds.clear();
        fds.push_back({cancel != nullptr ? cancel->fd() : -1, POLLIN, 0});
        fds.push_back({pending.size() < kMaxPendingConnections ? listen_fd : -1, POLLIN, 0});
        for (const auto& p : pending) fds.push_back({p->fd.get(), POLLIN, 0});
        int rc = 0;
        do {
            rc = ::poll(fds.data(), fds.size(), pollTimeoutMs(progress.sliceEnd()));
        } while (rc < 0 && errno == EINTR);
        if (rc < 0)
            return core::ioError("accepting attention peers on {}: poll(): {}", listen_address, errnoText(errno));
        if (fds[0].revents != 0) {
            return core::Status(core::StatusCode::kCancelled,
                                fmt::format("accepting attention peers on {}: cancelled", listen_address));
        }
        if (rc == 0 && Clock::now() < deadline) {
            if (progress.reportDue()) {
                std::vector<int> missing;
                for (size_t i = 0; i < expected_ranks.size(); ++i) {
                    if (!accepted[i].valid()) missing.push_back(expected_ranks[i]);
                }
                AFD_LOG_INFO("{} rank {} listening on {}: waiting for {} (of its {} peers) to connect ({})",
                             roleName(self.role), self.rank, listen_address, describeRanks(Role::kAttention, missing),
                             expected_ranks.size(), progress.progress());
            }
            continue;
        }
        if (rc == 0) {
            std::vector<std::string> missing;
            for (size_t i = 0; i < expected_ranks.size(); ++i) {
                if (!accepted[i].valid()) missing.push_back(fmt::format("attention rank {}", expected_ranks[i]));
            }
            return core::timeoutError(
                "{} rank {} listening on {}: {} never connected within {}{}", roleName(self.role), self.rank,
                listen_address, fmt::join(missing, ", "),
                formatDuration(std::chrono::duration_cast<milliseconds>(Clock::now() - start)),
                last_rejection.empty() ? "" : fmt::format(" (last rejected hello: {})", last_rejection));
        }
        const size_t num_polled = pending.size();
        if (fds[1].revents != 0) {
            core::Result<core::UniqueFd> fd = acceptTcp(listen_fd, Clock::now(), cancel, listen_address);
            if (fd.isOk()) {
                auto p = std::make_unique<Pending>();
                p->address = peerAddress(fd->get());
                p->fd = std::move(*fd);
                pending.push_back(std::move(p));
            } else if (fd.status().code() != core::StatusCode::kTimeout) {
                return fd.status();
            }
        }
        for (size_t k = 0; k < num_polled; ++k) {
            Pending& p = *pending[k];
            if (fds[k + 2].revents == 0) continue;
            const ssize_t n = ::recv(p.fd.get(), p.bytes.data() + p.got, p.need - p.got, MSG_DONTWAIT);
            if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            if (n <= 0) {
                AFD_LOG_DEBUG("{} closed before its hello completed", peerLabel(p));
                p.fd.reset();
                continue;
            }
            p.got += static_cast<size_t>(n);
            if (p.got < p.need) continue;
            if (p.got == kFrameHeaderBytes) {
                core::Result<FrameHeader> header =
                    decodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(p.bytes.data(), kFrameHeaderBytes),
                                 kNoDataLimits, peerLabel(p));
                if (!header.isOk()) {
                    reject(p, header.status().message(), &last_rejection);
                    continue;
                }
                if (header->kind != FrameKind::kHello) {
                    reject(p, fmt::format("expected a hello frame, got {}", frameKindName(header->kind)),
                           &last_rejection);
                    continue;
                }
                p.header = *header;
                p.need = kFrameHeaderBytes + header->payload_bytes;
                if (p.got < p.need) continue;
            }
            core::Result<size_t> index = checkHello(p, expected_ranks, accepted, self);
            if (!index.isOk()) {
                reject(p, index.status().message(), &last_rejection);
                continue;
            }
            const std::vector<uint8_t> ack = encodeHelloAckFrame(self.limits);
            const core::Status sent = sendAll(p.fd.get(), ack.data(), ack.size(), deadline, cancel, peerLabel(p));
            if (!sent.isOk()) {
                AFD_LOG_WARN("hello of {} not acknowledged: {}", peerLabel(p), sent.message());
                p.fd.reset();
                continue;
            }
            AFD_LOG_INFO("{} rank {}: attention rank {} connected from {}", roleName(self.role), self.rank,
                         expected_ranks[*index], p.address);
            accepted[*index] = std::move(p.fd);
            ++num_accepted;
        }
        std::erase_if(pending, [](const std::unique_ptr<Pending>& p) { return !p->fd.valid(); });
    }
    return accepted;
}

}  // namespace afd::transport::tcp
