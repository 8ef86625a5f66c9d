#include "attention/remote_mlp_backend.h"

#include <cstring>

#include "core/check.h"
#include "kernels/mlp_block.h"
#include "kernels/router.h"
#include "transport/afd_wire.h"

namespace afd::attention {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RemoteMlpBackend::RemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                                   transport::AfdMode mode, const transport::Topology& topology,
                                   transport::AttentionConnector& connector)
    : config_(config),
      weights_(weights),
      mode_(mode),
      connector_(connector),
      pending_(transport::kMaxStages),
      timings_(static_cast<size_t>(config.num_hidden_layers)) {
    if (mode == transport::AfdMode::kM2n) {
        auto partition = transport::ExpertPartition::create(config.num_experts, topology.numFfnRanks());
        AFD_CHECK_OK(partition.status());
        for (const auto& peer : connector.peers()) peer_ranges_.push_back(partition->rangeOf(peer.rank));
    }
}

bool RemoteMlpBackend::crosses(int64_t layer) const {
    return mode_ == transport::AfdMode::kP2p || config_.isMoeLayer(layer);
}

core::Status RemoteMlpBackend::beginStep(const StepPlan& plan) {
    transport::StepHeader header;
    header.step = plan.step;
    step_ = plan.step;
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

core::Status RemoteMlpBackend::dispatchM2n(int64_t layer, int stage, const float* x, int64_t T, PendingStage& p) {
    const int64_t H = config_.hidden_size;
    const int64_t K = config_.num_experts_per_tok;
    const auto router_start = std::chrono::steady_clock::now();
    router_ids_.resize(static_cast<size_t>(T * K));
    router_weights_.resize(static_cast<size_t>(T * K));
    if (T > 0) {
        kernels::routerForwardCpu(kernels::routerParams(config_, T, kernels::ActDType::kF32, x,
                                                        weights_.mlp[static_cast<size_t>(layer)].router.data<core::Bf16>(),
                                                        router_ids_.data(), router_weights_.data()));
    }
    // Rows for each FFN peer: the tokens with at least one expert in its range.
    const size_t num_peers = peer_ranges_.size();
    p.tokens.assign(num_peers, {});
    for (size_t k = 0; k < num_peers; ++k) {
        const auto range = peer_ranges_[k];
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t j = 0; j < K; ++j) {
                const int32_t e = router_ids_[static_cast<size_t>(t * K + j)];
                if (e >= range.begin && e < range.end) {
                    p.tokens[k].push_back(t);
                    break;
                }
            }
        }
    }
    int64_t total = 0;
    for (const auto& rows : p.tokens) total += static_cast<int64_t>(rows.size());
    p.send_hidden.resize(static_cast<size_t>(total * H));
    p.send_ids.resize(static_cast<size_t>(total * K));
    p.send_weights.resize(static_cast<size_t>(total * K));
    p.payloads.assign(num_peers, {});
    int64_t row = 0;
    for (size_t k = 0; k < num_peers; ++k) {
        const auto range = peer_ranges_[k];
        const int64_t first = row;
        for (int64_t t : p.tokens[k]) {
            std::memcpy(p.send_hidden.data() + row * H, x + t * H, static_cast<size_t>(H) * sizeof(float));
            for (int64_t j = 0; j < K; ++j) {
                const int32_t e = router_ids_[static_cast<size_t>(t * K + j)];
                const bool here = e >= range.begin && e < range.end;
                p.send_ids[static_cast<size_t>(row * K + j)] = here ? static_cast<int32_t>(e - range.begin) : -1;
                p.send_weights[static_cast<size_t>(row * K + j)] =
                    here ? router_weights_[static_cast<size_t>(t * K + j)] : 0.0f;
            }
            ++row;
        }
        const int64_t rows = row - first;
        auto& payload = p.payloads[k];
        payload.rows = static_cast<uint32_t>(rows);
        payload.segments = {
            core::Tensor::view(p.send_hidden.data() + first * H, core::DType::kF32, {rows, H}),
            core::Tensor::view(p.send_ids.data() + first * K, core::DType::kI32, {rows, K}),
            core::Tensor::view(p.send_weights.data() + first * K, core::DType::kF32, {rows, K}),
        };
    }
    timings_[static_cast<size_t>(layer)].compute_seconds += secondsSince(router_start);
    const auto send_start = std::chrono::steady_clock::now();
    AFD_RETURN_IF_ERROR(
        connector_.dispatch({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)}, p.payloads));
    timings_[static_cast<size_t>(layer)].transfer_seconds += secondsSince(send_start);
    return core::Status::ok();
}

core::Status RemoteMlpBackend::submit(int64_t layer, int stage, const float* x, int64_t num_tokens, float* out) {
    AFD_CHECK(stage >= 0 && stage < static_cast<int>(pending_.size()), "stage {} out of range", stage);
    PendingStage& p = pending_[static_cast<size_t>(stage)];
    p.layer = layer;
    p.num_tokens = num_tokens;
    p.out = out;
    p.remote = crosses(layer);
    if (!p.remote) {
        const auto start = std::chrono::steady_clock::now();
        kernels::mlpBlockCpu(config_, weights_.mlp[static_cast<size_t>(layer)], x, num_tokens, out);
        timings_[static_cast<size_t>(layer)].compute_seconds += secondsSince(start);
        return core::Status::ok();
    }
    if (mode_ == transport::AfdMode::kM2n) return dispatchM2n(layer, stage, x, num_tokens, p);
    p.payloads.assign(1, {});
    p.payloads[0].rows = static_cast<uint32_t>(num_tokens);
    p.payloads[0].segments = {
        core::Tensor::view(const_cast<float*>(x), core::DType::kF32, {num_tokens, config_.hidden_size})};
    const auto start = std::chrono::steady_clock::now();
    AFD_RETURN_IF_ERROR(
        connector_.dispatch({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)}, p.payloads));
    timings_[static_cast<size_t>(layer)].transfer_seconds += secondsSince(start);
    return core::Status::ok();
}

core::Status RemoteMlpBackend::collect(int64_t layer, int stage) {
    PendingStage& p = pending_[static_cast<size_t>(stage)];
    AFD_CHECK(p.layer == layer, "collect of layer {} stage {} but layer {} was submitted", layer, stage, p.layer);
    if (!p.remote) return core::Status::ok();
    const int64_t H = config_.hidden_size;
    const auto start = std::chrono::steady_clock::now();
    AFD_ASSIGN_OR_RETURN(std::span<const transport::ReceivedFrame> frames,
                         connector_.combine({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)},
                                            transport::hiddenSpec(H)));
    timings_[static_cast<size_t>(layer)].transfer_seconds += secondsSince(start);
    const auto peers = connector_.peers();
    if (mode_ == transport::AfdMode::kP2p) {
        if (frames[0].rows != p.num_tokens) {
            return core::mismatch("{}: layer {} stage {}: {} rows back for {} sent", peers[0].describe(), layer, stage,
                                  frames[0].rows, p.num_tokens);
        }
        std::memcpy(p.out, frames[0].segments[0].rawData(), static_cast<size_t>(p.num_tokens * H) * sizeof(float));
        return core::Status::ok();
    }
    // The combine: each token's MoE output is the sum of its FFN ranks' partial sums, in rank order.
    std::fill(p.out, p.out + p.num_tokens * H, 0.0f);
    for (size_t k = 0; k < frames.size(); ++k) {
        if (frames[k].rows != p.tokens[k].size()) {
            return core::mismatch("{}: layer {} stage {}: {} rows back for {} sent", peers[k].describe(), layer, stage,
                                  frames[k].rows, p.tokens[k].size());
        }
        const auto* partial = static_cast<const float*>(frames[k].segments[0].rawData());
        for (size_t i = 0; i < p.tokens[k].size(); ++i) {
            float* dst = p.out + p.tokens[k][i] * H;
            const float* src = partial + static_cast<int64_t>(i) * H;
            for (int64_t h = 0; h < H; ++h) dst[h] += src[h];
        }
    }
    return core::Status::ok();
}

core::Status RemoteMlpBackend::endStep() { return core::Status::ok(); }

}  // namespace afd::attention
