// The nccl connector backend: GPU memory between ranks on any hosts, through NCCL point-to-point transfers (one GPU
// per rank: ranks cannot share one). The step header, the handshake and peer loss travel on the tcp backend's
// connections; every per-layer frame is one NCCL group of sends or receives posted on the caller's stream, with an
// in-band header checked on the device (nccl_device.h), capturable in graphs.
//
// Setup: every rank publishes its GPU's identity, and FFN rank 0 the communicators' unique ids, through the rendezvous
// beside the tcp endpoint (nccl_ranks.h). Once the tcp links are up, every rank checks that no two ranks share a GPU
// (kInvalidArgument naming both, before any communicator is made), joins the communicators (bounded by
// afd.connect_timeout_s), exchanges a first frame with each peer so that every connection exists before a step, and
// starts the monitor (nccl_monitor.h) that bounds the device waits by afd.step_timeout_s and ends them on peer loss.
#pragma once

#include "transport/connector_backend.h"

namespace afd::transport::nccl {

ConnectorBackend backend();

}  // namespace afd::transport::nccl
