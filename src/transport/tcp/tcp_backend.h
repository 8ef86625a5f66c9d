// The tcp entry of the connector factory: its capabilities (host memory, any hosts, not capturable) and the
// mapping of a ConnectorRequest onto TcpConnectorOptions (afd.host:afd.port, connector_extra_config's bind_host
// and advertise_host, the timeouts, the frame limits).
#pragma once

#include "transport/connector_backend.h"
#include "transport/tcp/tcp_connector.h"

namespace afd::transport::tcp {

ConnectorBackend backend();

// Precondition: validateRequest(request) passed and request.afd.connector is tcp.
TcpConnectorOptions optionsFor(const ConnectorRequest& request);

}  // namespace afd::transport::tcp
