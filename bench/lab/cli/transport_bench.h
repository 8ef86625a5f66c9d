// `afd bench transport`: the per-layer round trip of a device connector (cuda_ipc) between two processes on this host,
// against the same bytes moved and flagged inside one process, in the same run.
//
//   afd     this process is an attention rank, a child it spawns (`afd bench transport --role ffn`) the FFN rank, over
//           the connector the factory makes (rendezvous on loopback). Per timed step: a step header, then `layers`
//           crossings of T rows each: postDispatch (the m2n A2F frame: BF16 hidden, ids, weights) and postCombine (the
//           F2A frame: FP32 rows, which the FFN side sends back from a buffer of its own without computing). Both
//           sides post every layer of the step at once, so the GPU runs the crossings back to back, signalled on the
//           device; the time per crossing is the step's CUDA-event time over `layers`.
//   local   the peer: the same two frames' bytes per crossing copied device to device within this process
//           (cudaMemcpyAsync), each followed by an 8-byte flag write, on one stream, timed alike.
// Roles of one GPU share it: run under MPS (without it the processes time-slice, milliseconds per hand-off).
#pragma once

#if defined(AFD_HAVE_CUDA)

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace afd::lab {

struct TransportBenchOptions {
    std::string connector = "cuda_ipc";
    std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    int layers = 48;       // crossings per timed step
    int steps = 20;        // timed steps per token count
    int warmup_steps = 3;  // before them
    int64_t hidden = 2048;
    int64_t top_k = 8;
    int gpu = 0;
    int port = 0;  // the rendezvous port; 0: a free one (the parent's choice, given to the child)
    double timeout_s = 120;
};

struct TransportBenchRow {
    int64_t tokens = 0;
    uint64_t a2f_bytes = 0;  // one A2F frame
    uint64_t f2a_bytes = 0;  // one F2A frame
    double afd_us = 0;       // median per crossing, two processes through the connector
    double afd_p10_us = 0;
    double afd_p90_us = 0;
    double local_us = 0;  // median per crossing, the same bytes and flags within this process
};

struct TransportBenchResult {
    std::string device;
    std::string connector;
    bool mps = false;  // an MPS control daemon was found (its pipe directory)
    std::vector<TransportBenchRow> rows;
};

// The attention side (spawns the FFN child) and the FFN side (`role` "ffn": serves until the attention side leaves).
core::Result<TransportBenchResult> runTransportBench(const TransportBenchOptions& options);
core::Status serveTransportBench(const TransportBenchOptions& options);

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA
