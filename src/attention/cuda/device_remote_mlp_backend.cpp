#include "attention/cuda/device_remote_mlp_backend.h"

#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/afd_frames_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "transport/afd_wire.h"
#include "transport/connector_factory.h"

namespace afd::attention {

static_assert(kernels::kMaxSummedPartials >= transport::kMaxDevicePeers,
              "the partial-sum kernel must take every FFN peer a device connector allows");

DeviceRemoteMlpBackend::DeviceRemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                                               transport::AfdMode mode, const transport::Topology& topology,
                                               transport::AttentionConnector& connector, int gpu, void* stream,
                                               bool graph_capturable)
    : config_(config), mode_(mode), connector_(connector), gpu_(gpu), stream_(stream), capturable_(graph_capturable) {
    const size_t num_peers = connector.peers().size();
    AFD_CHECK(num_peers >= 1 && num_peers <= static_cast<size_t>(kernels::kMaxSummedPartials),
              "the device data plane adds the partial sums of 1 ... {} FFN ranks, this rank has {}",
              kernels::kMaxSummedPartials, num_peers);
    rows_.assign(num_peers, 0);
    if (mode == transport::AfdMode::kM2n) {
        auto partition = transport::ExpertPartition::create(config.num_experts, topology.numFfnRanks());
        AFD_CHECK_OK(partition.status());
        for (const auto& peer : connector.peers()) peer_ranges_.push_back(partition->rangeOf(peer.rank));
        kernels_ = std::make_unique<CudaMlpKernels>(config, weights, gpu, static_cast<cudaStream_t>(stream));
    }
    for (auto& p : pending_) p.payloads.resize(num_peers);
}

void DeviceRemoteMlpBackend::reserve(const StepLimits& limits) {
    if (kernels_ == nullptr) return;
    kernels_->reserve(limits.max_tokens);
    growRouting(limits.max_tokens);
}

void DeviceRemoteMlpBackend::growRouting(int64_t rows) {
    if (rows <= routing_rows_) return;
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    // NOTE: reallocating while frames may still be read; only outside a step (reserve) or before the first use.
    AFD_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
    const size_t bytes = static_cast<size_t>(rows * config_.num_experts_per_tok) * sizeof(int32_t);
    for (size_t s = 0; s < transport::kMaxStages; ++s) {
        local_ids_[s].clear();
        local_weights_[s].clear();
        for (size_t k = 0; k < peer_ranges_.size(); ++k) {
            local_ids_[s].emplace_back(bytes);
            local_weights_[s].emplace_back(bytes);
        }
    }
    routing_rows_ = rows;
}

core::Status DeviceRemoteMlpBackend::beginStep(const StepPlan& plan) {
    num_valid_ = plan.padded() ? plan.num_valid_tokens.data<int32_t>() : nullptr;
    step_ = plan.step;
    if (plan.capturing) return core::Status::ok();  // each replay sends its header (beforeReplay)
    return sendHeader(plan);
}

core::Status DeviceRemoteMlpBackend::beforeReplay(const StepPlan& plan) {
    step_ = plan.step;
    return sendHeader(plan);
}

core::Status DeviceRemoteMlpBackend::sendHeader(const StepPlan& plan) {
    transport::StepHeader header;
    header.step = plan.step;
    header.flags = plan.flags;
    if (plan.last) {
        header.flags = transport::kStepShutdown;
        header.num_stages = 1;
    } else {
        AFD_CHECK(!plan.stage_tokens.empty() && plan.stage_tokens.size() <= transport::kMaxStages,
                  "a step has 1 or 2 stages, got {}", plan.stage_tokens.size());
        header.num_stages = static_cast<uint32_t>(plan.stage_tokens.size());
        for (size_t s = 0; s < plan.stage_tokens.size(); ++s) {
            header.stage_tokens[s] = static_cast<uint32_t>(plan.stage_tokens[s]);
        }
    }
    return connector_.sendStep(header);
}

core::Status DeviceRemoteMlpBackend::submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) {
    AFD_CHECK(stage >= 0 && stage < static_cast<int>(transport::kMaxStages), "stage {} out of range", stage);
    const core::Device device = core::Device::cuda(gpu_);
    const int64_t H = config_.hidden_size;
    AFD_CHECK(x.device() == device && out.device() == device && x.dtype() == core::DType::kBf16 &&
                  out.dtype() == core::DType::kF32 && x.dim() == 2 && x.size(1) == H && out.shape() == x.shape(),
              "device AFD backend: x {} {} on {} and out {} {} on {} must be [n, {}] BF16 and FP32 on {}",
              core::shapeToString(x.shape()), core::dtypeName(x.dtype()), x.device().toString(),
              core::shapeToString(out.shape()), core::dtypeName(out.dtype()), out.device().toString(), H,
              device.toString());
    PendingStage& p = pending_[static_cast<size_t>(stage)];
    p.layer = layer;
    p.rows = x.size(0);
    p.out = out;
    const bool m2n = mode_ == transport::AfdMode::kM2n;
    p.remote = !m2n || config_.isMoeLayer(layer);
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    const auto* in = static_cast<const core::Bf16*>(x.rawData());
    if (!p.remote) {
        if (p.rows > 0) kernels_->dense(layer, in, p.rows, static_cast<float*>(out.rawData()));
        return core::Status::ok();
    }
    const int64_t K = config_.num_experts_per_tok;
    const size_t num_peers = p.payloads.size();
    if (m2n) {
        if (p.rows > 0) {
            kernels_->reserve(p.rows);
            growRouting(p.rows);
            kernels_->route(layer, in, p.rows, num_valid_);
        }
        for (size_t k = 0; k < num_peers; ++k) {
            auto* ids = p.rows > 0 ? local_ids_[stage][k].as<int32_t>() : nullptr;
            auto* weights = p.rows > 0 ? local_weights_[stage][k].as<float>() : nullptr;
            if (p.rows > 0) {
                kernels::SplitRoutingParams split;
                split.rows = p.rows;
                split.top_k = K;
                split.begin = peer_ranges_[k].begin;
                split.end = peer_ranges_[k].end;
                split.ids = kernels_->topkIds();
                split.weights = kernels_->topkWeights();
                split.local_ids = ids;
                split.local_weights = weights;
                kernels::splitRoutingCuda(split, stream_);
            }
            auto& payload = p.payloads[k];
            payload.rows = static_cast<uint32_t>(p.rows);
            payload.segments = {x, core::Tensor::view(ids, core::DType::kI32, {p.rows, K}, device),
                                core::Tensor::view(weights, core::DType::kF32, {p.rows, K}, device)};
        }
    } else {
        p.payloads[0].rows = static_cast<uint32_t>(p.rows);
        p.payloads[0].segments = {x};
    }
    return connector_.postDispatch({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)}, p.payloads,
                                   stream_);
}

core::Status DeviceRemoteMlpBackend::collect(int64_t layer, int stage) {
    PendingStage& p = pending_[static_cast<size_t>(stage)];
    AFD_CHECK(p.layer == layer, "collect of layer {} stage {} but layer {} was submitted", layer, stage, p.layer);
    if (!p.remote) return core::Status::ok();
    std::fill(rows_.begin(), rows_.end(), static_cast<uint32_t>(p.rows));
    AFD_ASSIGN_OR_RETURN(std::span<const transport::ReceivedFrame> frames,
                         connector_.postCombine({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)},
                                                transport::hiddenSpec(config_.hidden_size), rows_, stream_));
    if (p.rows == 0) return core::Status::ok();
    AFD_CUDA_CHECK(cudaSetDevice(gpu_));
    kernels::SumPartialsParams sum;
    sum.rows = p.rows;
    sum.cols = config_.hidden_size;
    sum.num_partials = static_cast<int>(frames.size());
    for (size_t k = 0; k < frames.size(); ++k)
        sum.partials[k] = static_cast<const float*>(frames[k].segments[0].rawData());
    sum.out = static_cast<float*>(p.out.rawData());
    kernels::sumPartialsCuda(sum, stream_);
    return core::Status::ok();
}

core::Status DeviceRemoteMlpBackend::resetAfterFailedStep() {
    return core::peerLost("the AFD connection to the FFN peers cannot carry another step after step {} failed", step_);
}

}  // namespace afd::attention
