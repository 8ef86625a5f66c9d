#include "transport/nccl/nccl_backend.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "transport/afd_wire.h"
#include "transport/nccl/nccl_connector.h"
#include "transport/nccl/nccl_ranks.h"
#include "transport/rendezvous.h"
#include "transport/tcp/tcp_backend.h"
#include "transport/tcp/tcp_connector.h"

namespace afd::transport::nccl {
namespace {

// How long a hang-up of an attention peer in the step in flight may take to turn out a clean leave (NcclMonitor).
constexpr std::chrono::milliseconds kHangupGrace{2000};

FrameSpec a2fSpec(const ConnectorRequest& r) {
    return r.afd.mode() == AfdMode::kM2n ? deviceM2nDispatchSpec(r.hidden_size, r.experts_per_token)
                                         : deviceHiddenSpec(r.hidden_size);
}

NcclEndpointSetup setupFor(const ConnectorRequest& r) {
    NcclEndpointSetup s;
    s.gpu = r.device.index;
    s.max_rows = static_cast<uint32_t>(r.afd.max_num_tokens);
    const bool attention = r.role == Role::kAttention;
    s.out_spec = attention ? a2fSpec(r) : hiddenSpec(r.hidden_size);
    s.in_spec = attention ? hiddenSpec(r.hidden_size) : a2fSpec(r);
    const Role other = attention ? Role::kFfn : Role::kAttention;
    for (const int peer : r.peers()) {
        s.peer_ranks.push_back(globalRank(other, peer, r.afd.num_attention_ranks, r.afd.num_ffn_ranks));
    }
    return s;
}

NcclMonitorOptions monitorOptions(const ConnectorRequest& r) {
    NcclMonitorOptions o;
    o.every_peer_needed = r.role == Role::kAttention;
    o.step_timeout = std::chrono::seconds(r.afd.step_timeout_s);
    o.hangup_grace = std::min(kHangupGrace, o.step_timeout);
    return o;
}

std::string hostName() {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
    std::string host(name);
    std::replace(host.begin(), host.end(), ' ', '_');
    return host;
}

core::Result<GpuIdentity> localGpu(int gpu) {
    cudaDeviceProp prop;
    const cudaError_t err = cudaGetDeviceProperties(&prop, gpu);
    if (err != cudaSuccess) {
        return core::internalError("nccl: reading the properties of cuda:{}: {}", gpu, cudaGetErrorString(err));
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    return GpuIdentity{ncclHostKey(std::getenv("NCCL_HOSTID"), hostBootId()), uuidHex({bytes, sizeof(prop.uuid.bytes)}),
                       gpu, hostName()};
}

// Every rank's GPU, from the blobs published at the join; the rule that no two share one.
core::Status checkGpus(Rendezvous& rendezvous, const AfdConfig& afd, Deadline deadline) {
    std::vector<RankGpu> all;
    for (const Role role : {Role::kFfn, Role::kAttention}) {
        const int count = role == Role::kFfn ? afd.num_ffn_ranks : afd.num_attention_ranks;
        for (int rank = 0; rank < count; ++rank) {
            AFD_ASSIGN_OR_RETURN(const std::string blob, rendezvous.fetch(role, rank, kGpuBlob, timeLeft(deadline)));
            AFD_ASSIGN_OR_RETURN(GpuIdentity gpu, decodeGpuIdentity(blob, describeRank(role, rank)));
            all.push_back({role, rank, std::move(gpu)});
        }
    }
    return checkNoSharedGpu(all);
}

// The tcp options with this rank's blobs published and, once the links are up, the communicators joined and warmed up.
// `own_ids`: the unique ids on FFN rank 0 (which publishes them), empty elsewhere (fetched).
tcp::TcpConnectorOptions controlOptions(const ConnectorRequest& r, const GpuIdentity& gpu,
                                        const std::vector<std::string>& own_ids, NcclEndpoint& endpoint,
                                        std::vector<int>& fds) {
    tcp::TcpConnectorOptions o = tcp::optionsFor(r);
    o.extra_blobs.push_back({kGpuBlob, encodeGpuIdentity(gpu)});
    if (!own_ids.empty()) o.extra_blobs.push_back({kUniqueIdBlob, encodeUniqueIds(own_ids)});
    o.after_connect = [&r, &endpoint, &fds, own_ids](Rendezvous& rendezvous,
                                                     std::span<const int> link_fds) -> core::Status {
        const auto timeout = std::chrono::seconds(r.afd.connect_timeout_s);
        const Deadline deadline = deadlineAfter(timeout);
        AFD_RETURN_IF_ERROR(checkGpus(rendezvous, r.afd, deadline));
        std::vector<std::string> ids = own_ids;
        if (ids.empty()) {
            AFD_ASSIGN_OR_RETURN(const std::string blob,
                                 rendezvous.fetch(Role::kFfn, 0, kUniqueIdBlob, timeLeft(deadline)));
            AFD_ASSIGN_OR_RETURN(ids, decodeUniqueIds(blob, kMaxStages, describeRank(Role::kFfn, 0)));
        }
        const int A = r.afd.num_attention_ranks;
        const int F = r.afd.num_ffn_ranks;
        AFD_ASSIGN_OR_RETURN(
            std::unique_ptr<NcclComms> comms,
            NcclComms::init(ids, worldSize(A, F), globalRank(r.role, r.rank, A, F), r.device.index, timeLeft(deadline),
                            r.setup_cancel, describeRank(r.role, r.rank), std::chrono::seconds(r.afd.step_timeout_s)));
        endpoint.attach(std::move(comms));
        AFD_RETURN_IF_ERROR(endpoint.warmUp(timeLeft(deadline)));
        fds.assign(link_fds.begin(), link_fds.end());
        return core::Status::ok();
    };
    return o;
}

// What both makers share before the control connector: the endpoint, this GPU's identity, FFN rank 0's ids.
struct Prepared {
    std::unique_ptr<NcclEndpoint> endpoint;
    GpuIdentity gpu;
    std::vector<std::string> own_ids;
};

core::Result<Prepared> prepare(const ConnectorRequest& r) {
    Prepared p;
    AFD_ASSIGN_OR_RETURN(p.gpu, localGpu(r.device.index));
    AFD_ASSIGN_OR_RETURN(p.endpoint, NcclEndpoint::create(setupFor(r)));
    if (r.role == Role::kFfn && r.rank == 0) {
        AFD_ASSIGN_OR_RETURN(p.own_ids, NcclComms::newUniqueIds(kMaxStages));
    }
    return p;
}

core::Result<std::unique_ptr<NcclMonitor>> startMonitor(const ConnectorRequest& r, NcclEndpoint& endpoint,
                                                        std::span<const PeerInfo> peers, std::vector<int> fds) {
    std::vector<PeerInfo> names(peers.begin(), peers.end());
    endpoint.setPeers(names);
    auto monitor = std::make_unique<NcclMonitor>(monitorOptions(r), endpoint, std::move(names));
    AFD_RETURN_IF_ERROR(monitor->start(std::move(fds)));
    return monitor;
}

core::Result<std::unique_ptr<AttentionConnector>> makeAttention(const ConnectorRequest& r) {
    AFD_ASSIGN_OR_RETURN(Prepared p, prepare(r));
    std::vector<int> fds;
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<AttentionConnector> control,
                         tcp::createAttentionConnector(controlOptions(r, p.gpu, p.own_ids, *p.endpoint, fds)));
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<NcclMonitor> monitor,
                         startMonitor(r, *p.endpoint, control->peers(), std::move(fds)));
    return std::unique_ptr<AttentionConnector>(
        new NcclAttentionConnector(std::move(control), std::move(p.endpoint), std::move(monitor)));
}

core::Result<std::unique_ptr<FfnConnector>> makeFfn(const ConnectorRequest& r) {
    AFD_ASSIGN_OR_RETURN(Prepared p, prepare(r));
    std::vector<int> fds;
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<FfnConnector> control,
                         tcp::createFfnConnector(controlOptions(r, p.gpu, p.own_ids, *p.endpoint, fds)));
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<NcclMonitor> monitor,
                         startMonitor(r, *p.endpoint, control->peers(), std::move(fds)));
    return std::unique_ptr<FfnConnector>(
        new NcclFfnConnector(std::move(control), std::move(p.endpoint), std::move(monitor)));
}

}  // namespace

ConnectorBackend backend() {
    ConnectorBackend b;
    b.capabilities = {ConnectorKind::kNccl, ConnectorMemory::kDevice, /*graph_capturable=*/true, /*cross_host=*/true,
                      /*ranks_may_share_gpu=*/false};
    b.make_attention = makeAttention;
    b.make_ffn = makeFfn;
    return b;
}

}  // namespace afd::transport::nccl
