// The tcp backend of both connector faces: CPU memory, any hosts. The CPU and CI path.
//
// Setup: FFN rank 0 hosts the rendezvous store at store_host:store_port. Every FFN rank listens for data
// connections on bind_host (an ephemeral port) and publishes advertise_host:port through the rendezvous as the
// blob kEndpointBlob; every attention rank fetches it from each FFN peer, connects and says hello
// (tcp_handshake.h: the two ends agree on version, fingerprint and frame limits). Either role may start first: all
// connects retry until rendezvous_timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transport/connector.h"
#include "transport/rendezvous.h"
#include "transport/role.h"
#include "transport/socket.h"
#include "transport/wait_progress.h"

namespace afd::transport::tcp {

// The rendezvous blob of an FFN rank: "host:port" of its data listener.
inline constexpr const char* kEndpointBlob = "tcp/endpoint";

struct TcpConnectorOptions {
    Role role = Role::kAttention;
    int rank = 0;
    int num_attention_ranks = 0;
    int num_ffn_ranks = 0;
    std::vector<int> peers;               // ranks of the other role this rank talks to (from the topology), no repeats
    std::string store_host;               // afd.host: FFN rank 0 hosts the store there
    int store_port = 0;                   // afd.port
    std::string bind_host = "127.0.0.1";  // FFN data listener
    std::string advertise_host;           // what attention ranks connect to; empty: bind_host
    std::string fingerprint;              // opaque, 1..kMaxFingerprintBytes bytes; equal on every rank
    std::chrono::milliseconds rendezvous_timeout{30000};  // rendezvous and connection setup
    // While setup waits (for the store, for ranks to register, for peers to connect), one INFO line this often
    // names who is still awaited; 0: never.
    std::chrono::milliseconds wait_report_interval = kWaitReportInterval;
    // FFN rank 0: the caller hosts the rendezvous store at store_host:store_port already (RendezvousOptions).
    bool store_started = false;
    // The rendezvous session (rendezvous_session.h): an FFN rank of a pool between sessions waits idle.
    SessionOptions session;
    std::chrono::milliseconds step_timeout{30000};  // every wait inside a step
    // The frame limits: rows of any frame and payload bytes of any data frame this rank receives. The handshake
    // refuses a peer with other limits, so they bound what this rank sends as well.
    uint32_t max_rows = 0;
    size_t max_frame_bytes = 0;
    // Interrupts the rendezvous and the connection setup (e.g. on SIGTERM); may be null; must outlive the
    // factory call.
    const Canceller* setup_cancel = nullptr;
    // For a backend built on these connections (cuda_ipc: the step header and peer loss travel here): blobs this rank
    // publishes beside its own, and a step run once every link is up, while the rendezvous is still joined, with the
    // links' fds in peers order (they stay open while the connector lives). Its error fails the creation.
    std::vector<RendezvousBlob> extra_blobs;
    std::function<core::Status(Rendezvous& rendezvous, std::span<const int> link_fds)> after_connect;
};

// Checks the options on their own (ranges, peers, hosts, sizes); messages name the field and the rule.
core::Status validateOptions(const TcpConnectorOptions& options);

// Rendezvous, handshake, buffers. Blocks until every peer is connected or the rendezvous timeout.
core::Result<std::unique_ptr<AttentionConnector>> createAttentionConnector(const TcpConnectorOptions& options);
core::Result<std::unique_ptr<FfnConnector>> createFfnConnector(const TcpConnectorOptions& options);

}  // namespace afd::transport::tcp
