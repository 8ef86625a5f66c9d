#include "transport/tcp/tcp_connector.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/logging.h"
#include "transport/frame.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_attention_connector.h"
#include "transport/tcp/tcp_ffn_connector.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_link.h"

namespace afd::transport::tcp {
namespace {

// One receive buffer per (stage, peer) holds a whole frame in CPU memory; beyond this a frame is a config error.
constexpr size_t kMaxFrameBytesLimit = size_t{4} << 30;

bool isWildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

std::string advertisedHost(const TcpConnectorOptions& o) {
    return o.advertise_host.empty() ? o.bind_host : o.advertise_host;
}

RendezvousOptions rendezvousOptions(const TcpConnectorOptions& o) {
    RendezvousOptions r;
    r.store = HostPort{o.store_host, o.store_port};
    r.host_store = o.role == Role::kFfn && o.rank == 0;
    r.store_started = r.host_store && o.store_started;
    r.report_interval = o.wait_report_interval;
    r.num_attention_ranks = o.num_attention_ranks;
    r.num_ffn_ranks = o.num_ffn_ranks;
    r.timeout = o.rendezvous_timeout;
    r.cancel = o.setup_cancel;
    r.session = o.session;
    return r;
}

HandshakeIdentity identity(const TcpConnectorOptions& o) {
    return {o.role, o.rank, o.fingerprint, FrameLimits{o.max_rows, o.max_frame_bytes}};
}

}  // namespace

core::Status validateOptions(const TcpConnectorOptions& o) {
    const std::string who = fmt::format("tcp connector of {} rank {}", roleName(o.role), o.rank);
    if (o.num_attention_ranks < 1 || o.num_ffn_ranks < 1) {
        return core::invalidArgument("{}: num_attention_ranks ({}) and num_ffn_ranks ({}) must be ≥ 1", who,
                                     o.num_attention_ranks, o.num_ffn_ranks);
    }
    const int own = o.role == Role::kAttention ? o.num_attention_ranks : o.num_ffn_ranks;
    const int other = o.role == Role::kAttention ? o.num_ffn_ranks : o.num_attention_ranks;
    const std::string_view other_role = roleName(o.role == Role::kAttention ? Role::kFfn : Role::kAttention);
    if (o.rank < 0 || o.rank >= own) return core::invalidArgument("{}: rank must be in 0..{}", who, own - 1);
    if (o.peers.empty()) return core::invalidArgument("{}: peers is empty", who);
    std::set<int> seen;
    for (int peer : o.peers) {
        if (peer < 0 || peer >= other) {
            return core::invalidArgument("{}: peer {} rank {} is out of range 0..{}", who, other_role, peer, other - 1);
        }
        if (!seen.insert(peer).second)
            return core::invalidArgument("{}: peer {} rank {} is listed twice", who, other_role, peer);
    }
    if (o.store_host.empty()) return core::invalidArgument("{}: store_host is empty", who);
    if (o.store_port < 1 || o.store_port > 65535) {
        return core::invalidArgument("{}: store_port {} must be in 1..65535", who, o.store_port);
    }
    if (o.role == Role::kFfn) {
        if (o.bind_host.empty()) return core::invalidArgument("{}: bind_host is empty", who);
        if (o.advertise_host.empty() && isWildcard(o.bind_host)) {
            return core::invalidArgument(
                "{}: bind_host '{}' is a wildcard; set advertise_host to an address "
                "attention ranks can reach",
                who, o.bind_host);
        }
    }
    if (o.fingerprint.empty() || o.fingerprint.size() > kMaxFingerprintBytes) {
        return core::invalidArgument("{}: fingerprint must have 1..{} bytes, got {}", who, kMaxFingerprintBytes,
                                     o.fingerprint.size());
    }
    if (o.rendezvous_timeout.count() <= 0 || o.step_timeout.count() <= 0) {
        return core::invalidArgument("{}: rendezvous_timeout ({} ms) and step_timeout ({} ms) must be positive", who,
                                     o.rendezvous_timeout.count(), o.step_timeout.count());
    }
    if (o.max_rows < 1) return core::invalidArgument("{}: max_rows must be ≥ 1", who);
    if (o.max_frame_bytes < 1 || o.max_frame_bytes > kMaxFrameBytesLimit) {
        return core::invalidArgument("{}: max_frame_bytes {} must be in 1..{}", who, o.max_frame_bytes,
                                     kMaxFrameBytesLimit);
    }
    return core::Status::ok();
}

core::Result<std::unique_ptr<AttentionConnector>> createAttentionConnector(const TcpConnectorOptions& options) {
    AFD_RETURN_IF_ERROR(validateOptions(options));
    if (options.role != Role::kAttention) {
        return core::invalidArgument("createAttentionConnector called with role {}", roleName(options.role));
    }
    RankRecord self{Role::kAttention, options.rank, kProtocolVersion, options.fingerprint};
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous,
                         Rendezvous::join(rendezvousOptions(options), std::move(self), options.extra_blobs));
    const Deadline deadline = deadlineAfter(options.rendezvous_timeout);
    const FrameLimits limits{options.max_rows, options.max_frame_bytes};
    std::vector<std::unique_ptr<TcpLink>> links;
    for (int ffn_rank : options.peers) {
        AFD_ASSIGN_OR_RETURN(const std::string published,
                             rendezvous->fetch(Role::kFfn, ffn_rank, kEndpointBlob, timeLeft(deadline)));
        core::Result<HostPort> endpoint = parseHostPort(published);
        if (!endpoint.isOk()) {
            return endpoint.status().withContext(
                fmt::format("endpoint of {} from the rendezvous", describeRank(Role::kFfn, ffn_rank)));
        }
        const PeerInfo peer{Role::kFfn, ffn_rank, endpoint->toString()};
        AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, connectAndHello(*endpoint, peer, identity(options), deadline,
                                                                options.setup_cancel, options.wait_report_interval));
        AFD_LOG_INFO("attention rank {}: connected to {}", options.rank, peer.describe());
        links.push_back(std::make_unique<TcpLink>(std::move(fd), peer, limits));
    }
    if (options.after_connect) {
        std::vector<int> fds;
        for (const auto& link : links) fds.push_back(link->fd());
        AFD_RETURN_IF_ERROR(options.after_connect(*rendezvous, fds));
    }
    return std::unique_ptr<AttentionConnector>(
        new TcpAttentionConnector(options, std::move(rendezvous), std::move(links)));
}

core::Result<std::unique_ptr<FfnConnector>> createFfnConnector(const TcpConnectorOptions& options) {
    AFD_RETURN_IF_ERROR(validateOptions(options));
    if (options.role != Role::kFfn) {
        return core::invalidArgument("createFfnConnector called with role {}", roleName(options.role));
    }
    core::Result<Listener> listener = listenTcp(options.bind_host, 0);
    if (!listener.isOk()) {
        return listener.status().withContext(fmt::format("ffn rank {} data listener", options.rank));
    }
    const std::string endpoint = HostPort{advertisedHost(options), listener->port}.toString();
    AFD_LOG_INFO("ffn rank {}: data listener on {}", options.rank, endpoint);
    RankRecord self{Role::kFfn, options.rank, kProtocolVersion, options.fingerprint};
    std::vector<RendezvousBlob> blobs = options.extra_blobs;
    blobs.push_back({kEndpointBlob, endpoint});
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous,
                         Rendezvous::join(rendezvousOptions(options), std::move(self), std::move(blobs)));
    AFD_ASSIGN_OR_RETURN(
        std::vector<core::UniqueFd> fds,
        acceptPeers(listener->fd.get(), endpoint, options.peers, identity(options),
                    deadlineAfter(options.rendezvous_timeout), options.setup_cancel, options.wait_report_interval));
    const FrameLimits limits{options.max_rows, options.max_frame_bytes};
    std::vector<std::unique_ptr<TcpLink>> links;
    for (size_t i = 0; i < fds.size(); ++i) {
        PeerInfo peer{Role::kAttention, options.peers[i], peerAddress(fds[i].get())};
        links.push_back(std::make_unique<TcpLink>(std::move(fds[i]), std::move(peer), limits));
    }
    if (options.after_connect) {
        std::vector<int> link_fds;
        for (const auto& link : links) link_fds.push_back(link->fd());
        AFD_RETURN_IF_ERROR(options.after_connect(*rendezvous, link_fds));
    }
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<Canceller> cancel, Canceller::create());
    return std::unique_ptr<FfnConnector>(
        new TcpFfnConnector(options, std::move(rendezvous), std::move(links), std::move(cancel)));
}

}  // namespace afd::transport::tcp
