// The cuda_ipc connector backend: GPU memory between the processes of one host (any GPUs, one GPU shared by both
// roles too, under MPS). The step header, the handshake and peer loss travel on the tcp backend's connections; every
// per-layer frame moves device to device (ipc_endpoint.h): the sender's kernel copies into the receiver's slot and
// publishes it, the receiver's kernel waits for it, both posted on the caller's stream and capturable in graphs.
//
// Setup: each rank allocates its inbox and publishes its IPC handle through the rendezvous (blob kInboxBlob) beside
// the tcp endpoint; once the tcp links are up, it opens every peer's inbox and starts watching the links.
#pragma once

#include "transport/connector_backend.h"

namespace afd::transport::cuda_ipc {

ConnectorBackend backend();

}  // namespace afd::transport::cuda_ipc
