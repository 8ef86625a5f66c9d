// The connector factory: the one place that knows which backends this build has (each registers a ConnectorBackend,
// connector_backend.h), answers their capabilities, checks that the kind named by afd.connector can run here, and
// makes a rank's connector through the backend.
//
// Order of use: checkConnectorUsable() with the rest of the configuration, before any weight is read (its errors
// are configuration errors: exit 2); make*Connector() once the rank is loaded.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "transport/afd_config.h"
#include "transport/connector.h"
#include "transport/connector_backend.h"
#include "transport/role.h"

namespace afd::transport {

// The capabilities of every connector this build has, in registration order.
std::vector<ConnectorCapabilities> builtConnectors();
// "tcp", or "tcp, cuda_ipc": the built connectors' names, for messages.
std::string builtConnectorNames();
// The capabilities of `kind`; std::nullopt when this build does not have it.
std::optional<ConnectorCapabilities> connectorCapabilities(ConnectorKind kind);

// Whether a connector of these capabilities can serve a rank of `role` on `device`: one that moves device memory
// needs a CUDA device on every rank (kInvalidArgument naming afd.connector and the rule).
core::Status checkCapabilitiesAllow(const ConnectorCapabilities& capabilities, Role role, core::Device device);

// Over a device connector one rank exchanges frames with at most this many peers: the FFN side gathers every peer's
// frames, and the attention side adds every FFN rank's partial sums, in one kernel launch each whose peer tables
// are at least this size (kernels/afd_frames_cuda.h; the FFN compute and the attention backend assert it).
inline constexpr int kMaxDevicePeers = 16;

// Validates config.connector against this build (kInvalidArgument: "afd.connector \"nccl\": this build's
// connectors are: tcp"), then a device connector's peer counts (kMaxDevicePeers, naming afd.num_attention_ranks or
// afd.num_ffn_ranks), then the rank's device (checkCapabilitiesAllow). Reads nothing, connects to nothing.
core::Status checkConnectorUsable(const AfdConfig& config, Role role, core::Device device);

// Checks a request whole (the config, role and rank, sizes, fingerprint, checkConnectorUsable); kInvalidArgument.
core::Status validateRequest(const ConnectorRequest& request);

// Validates the request, then makes the connector of afd.connector's backend (rendezvous, handshake, buffers).
// Blocks until every peer is connected, bounded by afd.connect_timeout_s.
core::Result<std::unique_ptr<AttentionConnector>> makeAttentionConnector(const ConnectorRequest& request);
core::Result<std::unique_ptr<FfnConnector>> makeFfnConnector(const ConnectorRequest& request);

}  // namespace afd::transport
