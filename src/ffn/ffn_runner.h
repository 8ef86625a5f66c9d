// FfnRunner: one FFN rank's step loop body. Per step: receive the step header from every active attention peer,
// then for each crossing layer (m2n: MoE layers; p2p: every layer) and each stage in order: receive the A2F
// frames of all peers, compute on the gathered tokens, send each peer its F2A frame.
//
// Metrics (on the registry given): steps, tokens, per-layer compute and wait seconds, and the tokens routed to each
// of the rank's experts (ExpertTokenCounters: m2n from the frames' ids; p2p from the compute's own count, folded in
// when the registry renders, when the compute keeps one).
//
// Threads: used by the worker thread only (the connector's cancel() is the one call another thread makes).
#pragma once

#include <cstdint>
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
              transport::FfnConnector& connector, core::MetricsRegistry& metrics, int64_t expert_begin = 0);

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
    // Metrics (registered once; updates are atomic).
    core::Counter& steps_total_;
    core::Counter& tokens_total_;
    std::vector<core::Counter*> layer_compute_;
    std::vector<core::Counter*> layer_wait_;
    std::unique_ptr<ExpertTokenCounters> expert_tokens_;  // null when nothing counts (a p2p compute without a count)
    std::vector<uint64_t> routed_totals_;                 // the collector's scratch
    core::MetricsRegistry::CollectorHandle routed_collector_;  // last: removed before the members it reads
};

}  // namespace afd::ffn
