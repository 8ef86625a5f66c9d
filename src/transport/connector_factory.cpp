#include "transport/connector_factory.h"

#include <fmt/format.h>

#include <span>

#include "core/check.h"
#include "transport/tcp/tcp_backend.h"
#if AFD_HAVE_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_backend.h"
#endif
#if AFD_HAVE_NCCL
#include "transport/nccl/nccl_backend.h"
#endif

namespace afd::transport {
namespace {

// Every backend of this build. A new backend adds its entry here (and nowhere else).
std::span<const ConnectorBackend> backends() {
    static const ConnectorBackend table[] = {
        tcp::backend(),
#if AFD_HAVE_CUDA_IPC
        cuda_ipc::backend(),
#endif
#if AFD_HAVE_NCCL
        nccl::backend(),
#endif
    };
    return table;
}

const ConnectorBackend* findBackend(ConnectorKind kind) {
    for (const ConnectorBackend& backend : backends()) {
        if (backend.capabilities.kind == kind) return &backend;
    }
    return nullptr;
}

core::Result<const ConnectorBackend*> usableBackend(const ConnectorRequest& request) {
    AFD_RETURN_IF_ERROR(validateRequest(request));
    const ConnectorBackend* backend = findBackend(request.afd.connector);
    AFD_CHECK(backend != nullptr, "validateRequest passed an unbuilt connector");
    return backend;
}

// Checked for the whole deployment, so that every rank refuses the same config.
core::Status checkDevicePeers(const AfdConfig& config, const ConnectorCapabilities& capabilities) {
    if (!capabilities.needsCudaDevice()) return core::Status::ok();
    const Topology topology = config.topology();
    if (topology.mostAttentionPeersOfFfn() > kMaxDevicePeers) {
        return core::invalidArgument(
            "afd.num_attention_ranks {} with afd.num_ffn_ranks {} ({}): an FFN rank would serve {} attention ranks, "
            "but over afd.connector \"{}\" it serves at most {}",
            config.num_attention_ranks, config.num_ffn_ranks, modeName(config.mode()),
            topology.mostAttentionPeersOfFfn(), connectorName(capabilities.kind), kMaxDevicePeers);
    }
    if (topology.mostFfnPeersOfAttention() > kMaxDevicePeers) {
        return core::invalidArgument(
            "afd.num_ffn_ranks {} ({}): an attention rank would add the partial sums of {} FFN ranks, but over "
            "afd.connector \"{}\" it talks to at most {}",
            config.num_ffn_ranks, modeName(config.mode()), topology.mostFfnPeersOfAttention(),
            connectorName(capabilities.kind), kMaxDevicePeers);
    }
    return core::Status::ok();
}

}  // namespace

std::vector<ConnectorCapabilities> builtConnectors() {
    std::vector<ConnectorCapabilities> built;
    for (const ConnectorBackend& backend : backends()) built.push_back(backend.capabilities);
    return built;
}

std::string builtConnectorNames() {
    std::vector<std::string_view> names;
    for (const ConnectorBackend& backend : backends()) names.push_back(connectorName(backend.capabilities.kind));
    return fmt::format("{}", fmt::join(names, ", "));
}

std::optional<ConnectorCapabilities> connectorCapabilities(ConnectorKind kind) {
    const ConnectorBackend* backend = findBackend(kind);
    if (backend == nullptr) return std::nullopt;
    return backend->capabilities;
}

core::Status checkCapabilitiesAllow(const ConnectorCapabilities& capabilities, Role role, core::Device device) {
    if (capabilities.needsCudaDevice() && device.isCpu()) {
        return core::invalidArgument(
            "afd.connector \"{}\" moves device memory: every rank needs a CUDA device (--device cuda), but this {} "
            "rank runs on the CPU (the tcp connector serves CPU ranks)",
            connectorName(capabilities.kind), roleName(role));
    }
    return core::Status::ok();
}

core::Status checkConnectorUsable(const AfdConfig& config, Role role, core::Device device) {
    const std::optional<ConnectorCapabilities> capabilities = connectorCapabilities(config.connector);
    if (!capabilities) {
        return core::invalidArgument("afd.connector \"{}\": this build's connectors are: {}",
                                     connectorName(config.connector), builtConnectorNames());
    }
    AFD_RETURN_IF_ERROR(checkDevicePeers(config, *capabilities));
    return checkCapabilitiesAllow(*capabilities, role, device);
}

core::Status validateRequest(const ConnectorRequest& r) {
    AFD_RETURN_IF_ERROR(r.afd.validate());
    if (r.afd.role != r.role) {
        return core::invalidArgument("connector request for the {} role carries an afd.role of {}", roleName(r.role),
                                     roleName(r.afd.role));
    }
    const int ranks = r.role == Role::kAttention ? r.afd.num_attention_ranks : r.afd.num_ffn_ranks;
    if (r.rank < 0 || r.rank >= ranks) {
        return core::invalidArgument("connector request: {} rank {} must be in [0, {})", roleName(r.role), r.rank,
                                     ranks);
    }
    if (r.model_fingerprint.empty()) return core::invalidArgument("connector request: the model fingerprint is empty");
    if (r.hidden_size < 1 || (r.afd.mode() == AfdMode::kM2n && r.experts_per_token < 1)) {
        return core::invalidArgument("connector request: hidden_size {} and (m2n) experts_per_token {} must be >= 1",
                                     r.hidden_size, r.experts_per_token);
    }
    return checkConnectorUsable(r.afd, r.role, r.device);
}

core::Result<std::unique_ptr<AttentionConnector>> makeAttentionConnector(const ConnectorRequest& request) {
    if (request.role != Role::kAttention) {
        return core::invalidArgument("makeAttentionConnector called for the {} role", roleName(request.role));
    }
    AFD_ASSIGN_OR_RETURN(const ConnectorBackend* backend, usableBackend(request));
    return backend->make_attention(request);
}

core::Result<std::unique_ptr<FfnConnector>> makeFfnConnector(const ConnectorRequest& request) {
    if (request.role != Role::kFfn) {
        return core::invalidArgument("makeFfnConnector called for the {} role", roleName(request.role));
    }
    AFD_ASSIGN_OR_RETURN(const ConnectorBackend* backend, usableBackend(request));
    return backend->make_ffn(request);
}

}  // namespace afd::transport
