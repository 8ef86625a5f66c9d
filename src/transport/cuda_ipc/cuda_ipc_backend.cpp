#include "transport/cuda_ipc/cuda_ipc_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "transport/afd_wire.h"
#include "transport/cuda_ipc/cuda_ipc_connector.h"
#include "transport/cuda_ipc/ipc_endpoint.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_backend.h"
#include "transport/tcp/tcp_connector.h"

namespace afd::transport::cuda_ipc {
namespace {

FrameSpec a2fSpec(const ConnectorRequest& r) {
    return r.afd.mode() == AfdMode::kM2n ? deviceM2nDispatchSpec(r.hidden_size, r.experts_per_token)
                                         : deviceHiddenSpec(r.hidden_size);
}

IpcEndpointSetup setupFor(const ConnectorRequest& r) {
    IpcEndpointSetup s;
    s.gpu = r.device.index;
    s.max_rows = static_cast<uint32_t>(r.afd.max_num_tokens);
    const bool attention = r.role == Role::kAttention;
    s.out_spec = attention ? a2fSpec(r) : hiddenSpec(r.hidden_size);
    s.in_spec = attention ? hiddenSpec(r.hidden_size) : a2fSpec(r);
    s.step_timeout = std::chrono::seconds(r.afd.step_timeout_s);
    return s;
}

// Where this rank sits among peer `peer_rank`'s peers, and how many that peer has.
std::pair<uint32_t, uint32_t> placeAmong(const ConnectorRequest& r, int peer_rank) {
    const Topology topology = r.afd.topology();
    const std::vector<int> theirs =
        r.role == Role::kAttention ? topology.attentionPeersOfFfn(peer_rank) : topology.ffnPeersOfAttention(peer_rank);
    const auto it = std::find(theirs.begin(), theirs.end(), r.rank);
    return {static_cast<uint32_t>(it - theirs.begin()), static_cast<uint32_t>(theirs.size())};
}

// The tcp options with the inbox published and the peers' inboxes opened once the links are up.
tcp::TcpConnectorOptions controlOptions(const ConnectorRequest& r, IpcEndpoint& endpoint, std::vector<int>& fds) {
    tcp::TcpConnectorOptions o = tcp::optionsFor(r);
    o.extra_blobs.push_back({kInboxBlob, endpoint.inbox().exportBlob()});
    const Role other = r.role == Role::kAttention ? Role::kFfn : Role::kAttention;
    const std::vector<int> peers = r.peers();
    const auto timeout = std::chrono::seconds(r.afd.connect_timeout_s);
    o.after_connect = [&r, &endpoint, &fds, other, peers, timeout](Rendezvous& rendezvous,
                                                                   std::span<const int> link_fds) -> core::Status {
        for (size_t i = 0; i < peers.size(); ++i) {
            const std::string name = describeRank(other, peers[i]);
            AFD_ASSIGN_OR_RETURN(const std::string blob, rendezvous.fetch(other, peers[i], kInboxBlob, timeout));
            const auto [index, count] = placeAmong(r, peers[i]);
            AFD_RETURN_IF_ERROR(endpoint.openPeer(i, blob, index, count, name));
        }
        fds.assign(link_fds.begin(), link_fds.end());
        return core::Status::ok();
    };
    return o;
}

std::vector<PeerInfo> copyPeers(std::span<const PeerInfo> peers) { return {peers.begin(), peers.end()}; }

core::Result<std::unique_ptr<AttentionConnector>> makeAttention(const ConnectorRequest& r) {
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<IpcEndpoint> endpoint, IpcEndpoint::create(setupFor(r), r.peers().size()));
    std::vector<int> fds;
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<AttentionConnector> control,
                         tcp::createAttentionConnector(controlOptions(r, *endpoint, fds)));
    AFD_RETURN_IF_ERROR(endpoint->connect(std::move(fds), copyPeers(control->peers())));
    return std::unique_ptr<AttentionConnector>(new CudaIpcAttentionConnector(std::move(control), std::move(endpoint)));
}

core::Result<std::unique_ptr<FfnConnector>> makeFfn(const ConnectorRequest& r) {
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<IpcEndpoint> endpoint, IpcEndpoint::create(setupFor(r), r.peers().size()));
    std::vector<int> fds;
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<FfnConnector> control,
                         tcp::createFfnConnector(controlOptions(r, *endpoint, fds)));
    AFD_RETURN_IF_ERROR(endpoint->connect(std::move(fds), copyPeers(control->peers())));
    return std::unique_ptr<FfnConnector>(new CudaIpcFfnConnector(std::move(control), std::move(endpoint)));
}

}  // namespace

ConnectorBackend backend() {
    ConnectorBackend b;
    b.capabilities = {ConnectorKind::kCudaIpc, ConnectorMemory::kDevice, /*graph_capturable=*/true,
                      /*cross_host=*/false, /*ranks_may_share_gpu=*/true};
    b.make_attention = makeAttention;
    b.make_ffn = makeFfn;
    return b;
}

}  // namespace afd::transport::cuda_ipc
