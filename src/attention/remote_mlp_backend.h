// RemoteMlpBackend: an attention rank's MLP/MoE blocks through the connector (DESIGN.md §2, §3).
//
//   m2n  MoE layers: the router runs here (softmax, top-k, renormalisation); each FFN rank gets the tokens with
//        at least one expert in its range (hidden state once, its local expert ids and weights; other entries -1)
//        and returns their partial sums, which are added here in FFN rank order (the combine). Dense MLP layers
//        run here.
//   p2p  every layer: the hidden states go to this rank's one FFN peer, which runs the whole block.
// Every crossing (layer, stage) sends a frame to every FFN peer, empty when it has no tokens for it (lockstep).
// A step header goes to every peer at beginStep; a plan with `last` set sends the shutdown header instead.
// Engine thread only.
#pragma once

#include <chrono>
#include <vector>

#include "attention/mlp_backend.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/connector.h"
#include "transport/topology.h"

namespace afd::attention {

class RemoteMlpBackend : public MlpBackend {
public:
    // `weights`: this rank's (m2n: routers and dense MLPs; p2p: no MLP weights). `connector` peers must be, in
    // order, the FFN ranks of `topology` for this attention rank.
    RemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights, transport::AfdMode mode,
                     const transport::Topology& topology, transport::AttentionConnector& connector);

    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const float* x, int64_t num_tokens, float* out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override;
    std::vector<LayerTiming> layerTimings() const override { return timings_; }

    bool crosses(int64_t layer) const;

private:
    struct PendingStage {
        bool remote = false;
        int64_t layer = -1;
        int64_t num_tokens = 0;
        float* out = nullptr;
        std::vector<float> send_hidden;            // m2n: per-peer rows packed back to back [Σrows, H]
        std::vector<int32_t> send_ids;             // m2n: [Σrows, K]
        std::vector<float> send_weights;           // m2n: [Σrows, K]
        std::vector<std::vector<int64_t>> tokens;  // m2n: per peer, the stage's token index of each row
        std::vector<transport::FramePayload> payloads;
    };

    core::Status dispatchM2n(int64_t layer, int stage, const float* x, int64_t num_tokens, PendingStage& p);

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    const transport::AfdMode mode_;
    transport::AttentionConnector& connector_;
    std::vector<transport::ExpertRange> peer_ranges_;  // m2n: the expert range of each FFN peer
    uint64_t step_ = 0;
    std::vector<PendingStage> pending_;
    std::vector<int32_t> router_ids_;
    std::vector<float> router_weights_;
    std::vector<LayerTiming> timings_;
};

}  // namespace afd::attention
