// What a connector backend declares and is given: its capabilities (answered before any connector is made) and the
// request the factory (connector_factory.h) hands to its makers. A backend registers one ConnectorBackend in the
// factory's table; nothing else names backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "transport/afd_config.h"
#include "transport/connector.h"
#include "transport/rendezvous_session.h"
#include "transport/role.h"
#include "transport/socket.h"

namespace afd::transport {

// Where the tensors of FramePayload and ReceivedFrame live for a backend.
enum class ConnectorMemory { kHost, kDevice };

std::string_view connectorMemoryName(ConnectorMemory memory);

struct ConnectorCapabilities {
    ConnectorKind kind = ConnectorKind::kTcp;
    ConnectorMemory memory = ConnectorMemory::kHost;  // kDevice: every rank runs on a CUDA device
    bool graph_capturable = false;                    // its posts and waits may be captured in a CUDA graph
    bool cross_host = false;                          // ranks may run on different hosts
    bool ranks_may_share_gpu = false;                 // two ranks of one deployment may run on one GPU

    bool needsCudaDevice() const { return memory == ConnectorMemory::kDevice; }
};

// Everything a backend gets to make one rank's connector. The factory validates it before a maker runs.
struct ConnectorRequest {
    AfdConfig afd;  // validated; afd.role == role
    Role role = Role::kAttention;
    int rank = 0;                               // within afd's ranks of `role`
    core::Device device = core::Device::cpu();  // where this rank computes
    std::string model_fingerprint;              // model::modelFingerprint of the rank's checkpoint, non-empty
    int64_t hidden_size = 0;                    // the model's hidden size (frame widths)
    int64_t experts_per_token = 0;              // the router's top-k (m2n dispatch frames); unused in p2p
    const Canceller* setup_cancel = nullptr;    // interrupts rendezvous and connection setup; may be null
    // FFN rank 0: the caller started the rendezvous store at afd.host:afd.port (StoreServer) before loading, so that
    // a taken port is found before any weight is read, and keeps it up while the connector lives.
    bool rendezvous_store_started = false;
    // The rendezvous session (rendezvous_session.h): an FFN pool between sessions waits idle for attention rank 0,
    // and learns each session's number. Every backend's connector is made anew for each session.
    SessionOptions session;

    // The fingerprint every rank must share: the model's and the deployment's (afd.fingerprint()).
    std::string deploymentFingerprint() const;
    // The ranks of the other role this rank talks to (the topology).
    std::vector<int> peers() const;
    // The most payload bytes of one frame either way: afd.max_num_tokens rows of the widest frame (the m2n dispatch
    // rows carry ids and weights besides the hidden state).
    size_t maxFrameBytes() const;
};

using AttentionConnectorMaker = core::Result<std::unique_ptr<AttentionConnector>> (*)(const ConnectorRequest&);
using FfnConnectorMaker = core::Result<std::unique_ptr<FfnConnector>> (*)(const ConnectorRequest&);

// One entry of the factory's table.
struct ConnectorBackend {
    ConnectorCapabilities capabilities;
    AttentionConnectorMaker make_attention = nullptr;  // blocks until connected (bounded by afd.connect_timeout_s)
    FfnConnectorMaker make_ffn = nullptr;
};

}  // namespace afd::transport
