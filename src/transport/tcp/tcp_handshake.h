// The data-connection handshake of the tcp backend. Attention ranks connect to each FFN peer and send a hello
// {protocol version, role, rank, frame limits, fingerprint} (frame.h); the FFN rank checks that the sender is an
// attention rank it expects, not yet connected, of the same version, frame limits and fingerprint, and answers
// hello_ack carrying its own frame limits, or an error frame whose text the attention rank reports. The attention
// rank checks the FFN's limits against its own in turn. Equal limits are the rule: each side then receives only
// frames within its own limits and sends only frames within its peer's. A limits mismatch names both ranks, both
// values and the config keys the limits come from (tcp_backend.cpp derives them from afd.max_num_tokens and the
// model's frame widths).
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"
#include "transport/connector.h"
#include "transport/frame.h"
#include "transport/role.h"
#include "transport/socket.h"

namespace afd::transport::tcp {

struct HandshakeIdentity {
    Role role = Role::kAttention;
    int rank = 0;
    std::string fingerprint;
    FrameLimits limits;  // what this rank receives (and, being equal to its peers', sends)
};

// Attention side: connects to `peer` at `endpoint` (retrying until `deadline`, so the FFN may start later, and
// logging every `report_every` that it still waits), says hello, and waits for the answer. kMismatch with the FFN's
// text when it rejects the hello, or when the FFN's hello_ack carries other frame limits than self.limits.
core::Result<core::UniqueFd> connectAndHello(const HostPort& endpoint, const PeerInfo& peer,
                                             const HandshakeIdentity& self, Deadline deadline, const Canceller* cancel,
                                             std::chrono::milliseconds report_every = std::chrono::milliseconds(0));

// FFN side: accepts on `listen_fd` until every attention rank in `expected_ranks` has completed a valid hello;
// result[i] is the connection of expected_ranks[i]. Invalid hellos are answered with an error frame and closed
// while waiting goes on; every `report_every` (0: never) one INFO line names the ranks not connected yet; kTimeout
// at `deadline` names the ranks that never connected and the last rejection.
core::Result<std::vector<core::UniqueFd>> acceptPeers(
    int listen_fd, std::string_view listen_address, std::span<const int> expected_ranks, const HandshakeIdentity& self,
    Deadline deadline, const Canceller* cancel, std::chrono::milliseconds report_every = std::chrono::milliseconds(0));

}  // namespace afd::transport::tcp
