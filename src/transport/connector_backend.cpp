#include "transport/connector_backend.h"

#include "transport/afd_wire.h"

namespace afd::transport {

std::string_view connectorMemoryName(ConnectorMemory memory) {
    return memory == ConnectorMemory::kHost ? "host" : "device";
}

std::string ConnectorRequest::deploymentFingerprint() const { return model_fingerprint + " | " + afd.fingerprint(); }

std::vector<int> ConnectorRequest::peers() const {
    const Topology topology = afd.topology();
    return role == Role::kAttention ? topology.ffnPeersOfAttention(rank) : topology.attentionPeersOfFfn(rank);
}

size_t ConnectorRequest::maxFrameBytes() const {
    const FrameSpec widest =
        afd.mode() == AfdMode::kM2n ? m2nDispatchSpec(hidden_size, experts_per_token) : hiddenSpec(hidden_size);
    return widest.rowBytes() * static_cast<size_t>(afd.max_num_tokens);
}

}  // namespace afd::transport
