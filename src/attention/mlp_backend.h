// Where the MLP/MoE block of each decoder layer runs, seen from the model runner.
//
// The runner calls, per step: beginStep; then for each layer and stage: submit (start the block on that stage's
// post-attention-norm activations) and later collect (until its output is in `out`); then endStep.
// Submit and collect are split so that a remote backend can overlap one stage's transfer with the other
// stage's attention (dual-batch overlap). All calls come from the engine thread.
//
// Devices and streams: activations are tensors on the model runner's DeviceOps device, in its activation dtype. A
// backend's work is ordered on the ops' stream: submit's reads of x come after the ops enqueued before it, and after
// collect the ops enqueued next see `out` written (on the CPU every call completes before it returns).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/device_ops.h"
#include "core/status.h"
#include "core/tensor.h"

namespace afd::attention {

struct StepPlan {
    uint64_t step = 0;
    std::vector<int64_t> stage_tokens;  // tokens of each stage (1 stage, or 2 under dual-batch overlap)
    bool last = false;                  // no further steps will follow (the rank is leaving)
    // A padded step (a CUDA graph's bucket; one stage): [1] I32 on the ops' device, the number of leading rows that
    // are real. The other rows are padding whose MLP output is never read, and a backend may route them nowhere. It
    // is read on the device, so a replayed graph sees each step's count. No data (the default): every row is real.
    core::Tensor num_valid_tokens;
    bool padded() const { return num_valid_tokens.rawData() != nullptr; }
    // StepFlag bits (transport/frame.h) for a remote backend's step header: warm-up runs before a capture carry
    // kStepWarmup | kStepCapture (this shape will be replayed).
    uint32_t flags = 0;
    // The calls are being recorded into a CUDA graph, not run: host work a replay must repeat (a step header) is left
    // to beforeReplay.
    bool capturing = false;
};

class MlpBackend {
public:
    virtual ~MlpBackend() = default;

    // Allocates what steps within `limits` need (device workspaces), before the first step; the model runner calls
    // it once. Backends that allocate nothing need not override it.
    virtual void reserve(const StepLimits& limits) { (void)limits; }
    virtual core::Status beginStep(const StepPlan& plan) = 0;
    // Before each replay of a graph captured over beginStep ... endStep (plan.capturing): the host work of the
    // replayed step (`plan`: its step id, its bucket's rows and padding count). Backends with none need not override.
    virtual core::Status beforeReplay(const StepPlan& plan) {
        (void)plan;
        return core::Status::ok();
    }
    // x [n, H] (the ops' activation dtype, on the ops' device) stays valid and unmodified until the matching collect
    // returns; the result goes to out [n, H] FP32 on the same device, written as seen from the ops' stream once
    // collect returns. Tensors are handles: `out` is written through.
    virtual core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) = 0;
    virtual core::Status collect(int64_t layer, int stage) = 0;
    virtual core::Status endStep() = 0;
    // After a step that failed part-way (one of the calls above returned an error; the runner makes no further call
    // for that step): drops the step's state and returns ok when the backend can run the next step, or returns why it
    // cannot serve again (the engine then fails every request and reports itself unhealthy, keeping the step error's
    // code). The default suits backends that keep nothing across calls.
    virtual core::Status resetAfterFailedStep() { return core::Status::ok(); }
    // After the engine has synchronised the ops' stream at the end of a step: whether the step's device work really
    // completed (a device connector's waits may have ended on a lost peer or a timeout, leaving `out` unwritten). An
    // error fails the step as if a call above had returned it. Backends whose calls report everything return ok.
    virtual core::Status checkStepCompleted() { return core::Status::ok(); }
    // Whether submit and collect only enqueue work on the ops' stream (no host synchronisation, no host-side
    // dependence on the data), so that a step's layers can be captured in a CUDA graph and replayed.
    virtual bool capturable() const = 0;
    // Per-layer time this backend spent, for reports and metrics; backends without a breakdown return an empty
    // vector (or span). A remote backend splits its transfers into the A2F side (send) and the F2A side (receive).
    struct LayerTiming {
        double compute_seconds = 0.0;   // local compute
        double transfer_seconds = 0.0;  // waiting on / moving data to and from peers: send_seconds + receive_seconds
        double send_seconds = 0.0;      // A2F: getting the layer's rows out to the peers
        double receive_seconds = 0.0;   // F2A: waiting for and taking in the peers' results
        int64_t num_crossings = 0;      // (layer, stage) submissions that went to the peers
    };
    // Totals since the backend was created, one entry per decoder layer.
    virtual std::vector<LayerTiming> layerTimings() const { return {}; }
    // The last step's (since its beginStep), one entry per decoder layer; valid until the next beginStep. Engine
    // thread only; no copy, so that a per-step reader allocates nothing.
    virtual std::span<const LayerTiming> stepLayerTimings() const { return {}; }
};

}  // namespace afd::attention
