// DeviceRemoteMlpBackend: a GPU attention rank's MLP/MoE blocks through a device connector (cuda_ipc), every call
// enqueued on the ops' stream: no host synchronisation and no host copy per layer.
//
//   m2n  MoE layers: the router runs here (CudaMlpKernels); for each FFN rank a kernel turns its choices into that
//        rank's local ids and weights (-1 / 0 for experts elsewhere), and the frame carries the stage's BF16 hidden
//        rows with them. Every FFN rank gets every row of the stage: the row count of each frame is the stage's token
//        count, known when the step is planned, so nothing is counted on the host. The F2A frames carry FP32 partial
//        sums, added in FFN rank order (sumPartialsCuda) into the runner's FP32 output. Dense layers run here.
//   p2p  every layer: the BF16 hidden rows go to the one FFN peer; its FP32 result is copied to the output.
// The step header goes on the host at beginStep. After the engine synchronises a step, checkStepCompleted() reports
// what the connector's device waits met (a peer lost, a timeout, a bad frame): the step's results are not used then.
// Engine thread only.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "attention/cuda/cuda_mlp_kernels.h"
#include "attention/mlp_backend.h"
#include "kernels/cuda/device_memory.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/connector.h"
#include "transport/topology.h"

namespace afd::attention {

class DeviceRemoteMlpBackend final : public MlpBackend {
public:
    // `weights` on cuda:gpu (m2n: routers and dense MLPs); `connector` of device memory, its peers the FFN ranks of
    // `topology` for this rank in order; `stream`: the ops' stream. All outlive the backend. `graph_capturable`: the
    // connector's capability.
    DeviceRemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                           transport::AfdMode mode, const transport::Topology& topology,
                           transport::AttentionConnector& connector, int gpu, void* stream, bool graph_capturable);

    void reserve(const StepLimits& limits) override;
    core::Status beginStep(const StepPlan& plan) override;
    core::Status beforeReplay(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override;
    core::Status endStep() override { return core::Status::ok(); }
    core::Status checkStepCompleted() override { return connector_.deviceStatus(); }
    // Always an error, as RemoteMlpBackend's: the peers expect the rest of the failed step.
    core::Status resetAfterFailedStep() override;
    // Every call only enqueues on the stream, and the connector's posts may be captured: a decode step replays as one
    // graph, its header sent by beforeReplay.
    bool capturable() const override { return capturable_; }

private:
    struct PendingStage {
        bool remote = false;
        int64_t layer = -1;
        int64_t rows = 0;
        core::Tensor out;
        std::vector<transport::FramePayload> payloads;
    };

    void growRouting(int64_t rows);
    core::Status sendHeader(const StepPlan& plan);

    const model::ModelConfig& config_;
    const transport::AfdMode mode_;
    transport::AttentionConnector& connector_;
    const int gpu_;
    void* const stream_;
    std::unique_ptr<CudaMlpKernels> kernels_;          // m2n: the routers and dense layers
    std::vector<transport::ExpertRange> peer_ranges_;  // m2n: each FFN peer's experts
    int64_t routing_rows_ = 0;
    // m2n: per (stage, peer) the local ids [rows, K] I32 and weights [rows, K] F32 the frames carry.
    std::array<std::vector<kernels::cuda::DeviceBuffer>, transport::kMaxStages> local_ids_, local_weights_;
    std::array<PendingStage, transport::kMaxStages> pending_;
    std::vector<uint32_t> rows_;
    const int32_t* num_valid_ = nullptr;  // a padded step's
    uint64_t step_ = 0;
    bool capturable_ = false;  // the connector's posts may be captured
};

}  // namespace afd::attention
