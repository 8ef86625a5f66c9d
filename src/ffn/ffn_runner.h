// FfnRunner: one FFN rank's step loop body. Per step: receive the step header from every active attention peer,
// then for each crossing layer (m2n: MoE layers; p2p: every layer) and each stage in order: receive the A2F
// frames of all peers, compute on the gathered tokens, send each peer its F2A frame.
//
// Two data planes, chosen by the compute: a host compute (or a GPU one fed through host memory) gets each (layer,
// stage)'s frames on the host and the step runs call by call; a compute with device lanes (fed by a device connector,
// cuda_ipc) gets the whole step posted on its lane's stream at once (every layer's wait → gather → compute → send),
// and the host waits once, at the end of the step, then asks the connector what its device waits met.
//
// Metrics (on the registry given): steps, tokens, per-layer compute and wait seconds (host data plane; the device one
// has no per-layer host time: afd_ffn_device_step_seconds_total holds its whole steps), and the tokens routed to each
// of the rank's experts (ExpertTokenCounters: m2n host frames from their ids; otherwise from the compute's own count,
// folded in when the registry renders, when the compute keeps one).
//
// Threads: used by the worker thread only (the connector's cancel() is the one call another thread makes).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "ffn/expert_token_counters.h"
#include "ffn/ffn_compute.h"
#include "model/model_config.h"
#include "transport/connector.h"
#include "transport/topology.h"

namespace afd::ffn {

struct FfnRunnerOptions {
    // Device data plane over a capturable connector: a step of a shape the attention side will replay (its header
    // carries kStepCapture) is captured whole (every layer's wait → gather → compute → send) on the first lane and
    // launched; later steps of that shape replay it. Other steps run eagerly. Off: every step eagerly
    // (--enforce-eager).
    bool step_graphs = false;
};

struct FfnRunnerStats {
    uint64_t steps = 0;
    uint64_t tokens = 0;  // attention tokens served (sum of the peers' stage token counts)
    std::vector<double> layer_compute_seconds;
    std::vector<double> layer_wait_seconds;  // receiving and sending frames
};

class FfnRunner {
public:
    // `num_local_experts`: the size of this rank's expert range, to validate the peers' local ids against
    // [-1, num_local_experts); `expert_begin`: its first expert (the expert label of the token counters). p2p ranks
    // hold every expert (0, num_experts).
    FfnRunner(const model::ModelConfig& config, transport::AfdMode mode, int64_t num_local_experts, FfnCompute& compute,
              transport::FfnConnector& connector, core::MetricsRegistry& metrics, int64_t expert_begin = 0,
              FfnRunnerOptions options = {});

    // Waits for the next step header from every active peer (info.all_left when none is left).
    core::Result<transport::StepInfo> receiveStep();
    // Serves the step's layers and stages. Errors come from the connector (peer lost, timeout, bad frame,
    // cancelled) or from a peer's data (an expert id out of range: kCorrupt naming the peer).
    core::Status serve(const transport::StepInfo& info);

    // A snapshot (thread-safe: read from the admin thread).
    FfnRunnerStats stats() const;
    const std::vector<int64_t>& crossingLayers() const { return crossing_layers_; }

private:
    core::Status serveStage(const transport::StepInfo& info, int64_t layer, uint32_t stage);
    // The device data plane: posts the step's layers on the compute's lanes (or replays or captures its graph), then
    // waits for them.
    core::Status serveOnDevice(const transport::StepInfo& info);
    core::Status postStep(const transport::StepInfo& info);

    const model::ModelConfig& config_;
    const transport::AfdMode mode_;
    const int64_t num_local_experts_;
    FfnCompute& compute_;
    transport::FfnConnector& connector_;
    std::vector<int64_t> crossing_layers_;
    transport::FrameSpec a2f_spec_;
    transport::FrameSpec f2a_spec_;
    // Gathered inputs and the output of one (layer, stage): [T, H], [T, K], [T, K], [T, H].
    std::vector<float> x_, weights_, out_;
    std::vector<int32_t> ids_;
    // Device data plane: the A2F spec of device frames; per-peer scratch of one step.
    bool on_device_ = false;
    transport::FrameSpec device_a2f_spec_;
    std::unique_ptr<bool[]> active_;
    std::vector<uint32_t> rows_;
    std::vector<DevicePeerRows> peer_rows_;
    std::vector<transport::FramePayload> payloads_;
    core::Counter* device_step_seconds_ = nullptr;
    // Step graphs by shape: the number of stages, then per peer its activity and each stage's rows.
    std::map<std::vector<uint32_t>, int> step_graphs_;
    core::Counter* graph_replays_ = nullptr;
    core::Counter* graph_captures_ = nullptr;
    core::Counter* eager_steps_ = nullptr;
    // Metrics (registered once; updates are atomic).
    core::Counter& steps_total_;
    core::Counter& tokens_total_;
    std::vector<core::Counter*> layer_compute_;
    std::vector<core::Counter*> layer_wait_;
    FfnRunnerOptions options_;
    std::unique_ptr<ExpertTokenCounters> expert_tokens_;  // null when nothing counts (a p2p compute without a count)
    std::vector<uint64_t> routed_totals_;                 // the collector's scratch
    core::MetricsRegistry::CollectorHandle routed_collector_;  // last: removed before the members it reads
};

}  // namespace afd::ffn
