// The math an FFN rank runs for one (layer, stage), on its device. Two ways in:
//   host    FfnRunner hands it the tokens gathered from every attention peer (host FP32 memory, as the TCP connector
//           delivers them) and sends back what it writes; every call completes before it returns.
//   device  (a GPU compute fed by a device connector) the peers' rows are device views into the connector's receive
//           slots; computeDevice only enqueues, on the lane's stream, the gather, the layer's kernels and nothing
//           else, so that a step's layers need no host synchronisation. A lane is a stream with its own buffers,
//           workspace and graphs: lanes run concurrently (one per dual-batch stage).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace afd::ffn {

// One attention peer's A2F rows in device memory (the connector's receive slot).
struct DevicePeerRows {
    const void* x = nullptr;         // [rows, H] BF16
    const int32_t* ids = nullptr;    // m2n: [rows, K] local expert ids (-1: not this rank's); p2p: null
    const float* weights = nullptr;  // m2n: [rows, K]; p2p: null
    int64_t rows = 0;
};

class FfnCompute {
public:
    virtual ~FfnCompute() = default;

    // m2n: out[t] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) over this rank's experts, for `layer`.
    // x [T, H] F32; ids [T, K] local expert ids (-1 = not this rank's, already range-checked); weights [T, K];
    // out [T, H] F32. T may be 0.
    virtual core::Status moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids,
                                    const float* weights, float* out) = 0;
    // p2p: the whole MLP/MoE block of `layer` (router and experts, or the dense MLP). x, out [T, H] F32.
    virtual core::Status mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) = 0;

    // p2p: fills `totals` [num_experts] with the tokens this compute's own router has sent to each expert since it
    // was created (summed over layers; padding rows left out) and returns true; false when it keeps no such count
    // (then `totals` is untouched; m2n computes route nothing: FfnRunner counts the frames' ids). Thread-safe: any
    // thread, while calls run (the admin thread renders /metrics), also after release().
    virtual bool routedTokenTotals(std::span<uint64_t> totals) const {
        (void)totals;
        return false;
    }

    // ---- device entry points (numDeviceLanes() > 0) ----

    // Lanes of the device entry points; 0 for a compute without them (the CPU).
    virtual int numDeviceLanes() const { return 0; }
    // The lane's stream (a cudaStream_t): computeDevice enqueues on it, and the connector's posts for the lane go
    // there too.
    virtual void* laneStream(int lane) { return nullptr; }
    // Enqueues on the lane's stream: the peers' rows gathered back to back, then `layer` over them (m2n: the rows'
    // ids and weights, already range-checked by the sender's router; p2p: its own router or dense MLP). The FP32
    // results, in the same row order, are in laneOutput(lane) for the work enqueued after it on the lane's stream,
    // until the lane's next call. Rows in all: at most the max_rows the compute was made for; 0 enqueues nothing.
    virtual core::Status computeDevice(int lane, int64_t layer, std::span<const DevicePeerRows> peers) {
        return core::unsupported("{} has no device entry points", describe());
    }
    // [max_rows, H] FP32 on the device.
    virtual const float* laneOutput(int lane) const { return nullptr; }
    // Waits for everything enqueued on every lane (bounded by the connector's device waits, which end on their own).
    virtual core::Status synchronizeLanes() { return core::Status::ok(); }

    // Step graphs: between beginStepCapture and endStepCapture, what is enqueued on the lane's stream (computeDevice
    // and a capturable connector's posts) is recorded instead of run; endStepCapture(keep) instantiates it and returns
    // its id for launchStepGraph, which replays it on the lane's stream. endStepCapture(false) ends a capture that
    // failed part-way and drops it (returns -1).
    virtual core::Status beginStepCapture(int lane) { return core::unsupported("{} has no step graphs", describe()); }
    virtual core::Result<int> endStepCapture(int lane, bool keep) {
        return core::unsupported("{} has no step graphs", describe());
    }
    virtual core::Status launchStepGraph(int graph, int lane) {
        return core::unsupported("{} has no step graphs", describe());
    }

    // Between sessions: waits for every lane, drops the step graphs (they name the old connector's memory) and
    // forgets a frame error the last session recorded (synchronizeLanes' kCorrupt), so the next session starts clean.
    // Errors only for a device failure.
    virtual core::Status resetForNextSession() { return core::Status::ok(); }

    // "cpu", "cuda:3 (NVIDIA H200)".
    virtual std::string describe() const = 0;
    // Bytes of weights this compute holds on its device.
    virtual uint64_t deviceWeightBytes() const = 0;
    // Frees device memory (shutdown). Idempotent; nothing else may be called afterwards.
    virtual void release() = 0;
};

}  // namespace afd::ffn
