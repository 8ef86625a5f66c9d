// RemoteMlpBackend: an attention rank's MLP/MoE blocks through the connector (DESIGN.md §2, §3).
//
//   m2n  MoE layers: the router runs here, on the ops' device (softmax, top-k, renormalisation); each FFN rank gets
//        the tokens with at least one expert in its range (hidden state once, its local expert ids and weights; other
//        entries -1) and returns their partial sums, which are added here in FFN rank order (the combine). Dense MLP
//        layers run here, on the ops' device. Both through LocalMlpOps (local_mlp_ops.h), chosen by device.
//   p2p  every layer: the hidden states go to this rank's one FFN peer, which runs the whole block.
// Every crossing (layer, stage) sends a frame to every FFN peer, empty when it has no tokens for it (lockstep).
// A step header goes to every peer at beginStep; a plan with `last` set sends the shutdown header instead.
//
// Devices: the connector carries FP32 host rows. Activations that are not FP32 host tensors (a GPU runner's) are
// copied through host staging buffers by the DeviceOps (converting dtypes): submit copies x out (with the router's
// ids and weights) and synchronises the ops' stream; collect copies the output in and synchronises again, so no host
// buffer is read after it returns. FP32 host activations (CpuOps) are read and written in place. Dense layers never
// leave the device. Not capturable (the host drives every transfer).
// Engine thread only.
#pragma once

#include <chrono>
#include <vector>

#include <memory>

#include "attention/device_ops.h"
#include "attention/local_mlp_ops.h"
#include "attention/mlp_backend.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/connector.h"
#include "transport/topology.h"

namespace afd::attention {

class RemoteMlpBackend : public MlpBackend {
public:
    // `weights`: this rank's, on the ops' device (m2n: routers and dense MLPs; p2p: no MLP weights). `connector` peers
    // must be, in order, the FFN ranks of `topology` for this attention rank. `ops`: the model runner's.
    RemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights, transport::AfdMode mode,
                     const transport::Topology& topology, transport::AttentionConnector& connector, DeviceOps& ops);

    void reserve(const StepLimits& limits) override;
    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override;
    // Always an error: the FFN peers expect the rest of the failed step in lockstep, and a connector that returned an
    // error is unusable (transport/connector.h), so no step can follow.
    core::Status resetAfterFailedStep() override;
    bool capturable() const override { return false; }
    // send_seconds (A2F): staging the rows to the host (after waiting for the ops' stream, so the work enqueued
    // before is included on a device), m2n's packing per peer, and the connector's dispatch. receive_seconds (F2A):
    // the connector's combine (waiting for every peer's frame), the m2n sum of partials, and the copy to the output.
    std::vector<LayerTiming> layerTimings() const override { return timings_; }
    std::span<const LayerTiming> stepLayerTimings() const override { return step_timings_; }

    bool crosses(int64_t layer) const;

private:
    struct PendingStage {
        bool remote = false;
        int64_t layer = -1;
        int64_t num_tokens = 0;
        core::Tensor out;       // [n, H] the runner's output rows (the ops' device and dtype)
        core::Tensor host_out;  // [n, H] FP32 host rows the result is assembled in: `out`, or rows of out_staging
        // FP32 host staging (grown to the largest stage) for activations that are not FP32 host tensors.
        core::Tensor in_staging;
        core::Tensor out_staging;
        std::vector<float> send_hidden;            // m2n: per-peer rows packed back to back [Σrows, H]
        std::vector<int32_t> send_ids;             // m2n: [Σrows, K]
        std::vector<float> send_weights;           // m2n: [Σrows, K]
        std::vector<std::vector<int64_t>> tokens;  // m2n: per peer, the stage's token index of each row
        std::vector<transport::FramePayload> payloads;
    };

    core::Status dispatchM2n(int64_t layer, int stage, const core::Tensor& x, PendingStage& p);
    // Returns x as FP32 host rows (x itself, or its copy in p.in_staging), after synchronising the ops' stream (work
    // enqueued before, the router's, is done too).
    const float* stageIn(PendingStage& p, const core::Tensor& x);
    // Sets and returns p.host_out: FP32 host rows to assemble the result in (p.out itself, or p.out_staging rows).
    float* hostOut(PendingStage& p);
    // Copies p.host_out into p.out when they differ, and waits for the copy.
    void stageOut(PendingStage& p);
    // Adds to the layer's totals and its step figures.
    void addCompute(int64_t layer, double seconds);
    void addSend(int64_t layer, double seconds);
    void addReceive(int64_t layer, double seconds);

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    const transport::AfdMode mode_;
    transport::AttentionConnector& connector_;
    DeviceOps& ops_;
    std::vector<transport::ExpertRange> peer_ranges_;  // m2n: the expert range of each FFN peer
    uint64_t step_ = 0;
    std::vector<PendingStage> pending_;
    std::unique_ptr<LocalMlpOps> local_;     // m2n: the router and the dense layers
    core::Tensor router_ids_;                // [Σ, K] I32 host (pinned on a GPU), grown to the largest stage
    core::Tensor router_weights_;            // [Σ, K] F32 host
    std::vector<LayerTiming> timings_;       // since construction
    std::vector<LayerTiming> step_timings_;  // since the last beginStep
};

}  // namespace afd::attention
