#include "transport/tcp/tcp_backend.h"

#include <chrono>

namespace afd::transport::tcp {

TcpConnectorOptions optionsFor(const ConnectorRequest& request) {
    const AfdConfig& afd = request.afd;
    TcpConnectorOptions o;
    o.role = request.role;
    o.rank = request.rank;
    o.num_attention_ranks = afd.num_attention_ranks;
    o.num_ffn_ranks = afd.num_ffn_ranks;
    o.peers = request.peers();
    o.store_host = afd.host;
    o.store_port = afd.port;
    if (afd.connector_extra_config.bind_host) o.bind_host = *afd.connector_extra_config.bind_host;
    if (afd.connector_extra_config.advertise_host) o.advertise_host = *afd.connector_extra_config.advertise_host;
    o.fingerprint = request.deploymentFingerprint();
    o.rendezvous_timeout = std::chrono::seconds(afd.connect_timeout_s);
    o.step_timeout = std::chrono::seconds(afd.step_timeout_s);
    o.max_rows = static_cast<uint32_t>(afd.max_num_tokens);
    // The limit covers frames both ways (the connector checks what it sends against what the peer accepts).
    o.max_frame_bytes = request.maxFrameBytes();
    o.setup_cancel = request.setup_cancel;
    o.store_started = request.rendezvous_store_started;
    o.session = request.session;
    return o;
}

ConnectorBackend backend() {
    ConnectorBackend b;
    // Host memory: a GPU rank stages its tensors through the CPU, so any device may use it, two ranks on one GPU too.
    b.capabilities = {ConnectorKind::kTcp, ConnectorMemory::kHost, /*graph_capturable=*/false, /*cross_host=*/true,
                      /*ranks_may_share_gpu=*/true};
    b.make_attention = [](const ConnectorRequest& request) { return createAttentionConnector(optionsFor(request)); };
    b.make_ffn = [](const ConnectorRequest& request) { return createFfnConnector(optionsFor(request)); };
    return b;
}

}  // namespace afd::transport::tcp
