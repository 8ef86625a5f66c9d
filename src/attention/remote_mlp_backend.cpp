#include "attention/remote_mlp_backend.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "transport/afd_wire.h"

namespace afd::attention {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool isHostF32(const core::Tensor& t) { return t.device().isCpu() && t.dtype() == core::DType::kF32; }

// `buffer` as [rows, cols] host rows of `dtype`, reallocated through `ops` when it holds fewer.
core::Tensor hostRows(DeviceOps& ops, core::Tensor& buffer, int64_t rows, int64_t cols,
                      core::DType dtype = core::DType::kF32) {
    if (buffer.numel() < rows * cols || buffer.rawData() == nullptr) {
        buffer = ops.emptyHost(dtype, {std::max<int64_t>(rows, 1) * cols});
    }
    return buffer.slice(0, rows * cols).reshape({rows, cols});
}

}  // namespace

RemoteMlpBackend::RemoteMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
                                   transport::AfdMode mode, const transport::Topology& topology,
                                   transport::AttentionConnector& connector, DeviceOps& ops)
    : config_(config),
      weights_(weights),
      mode_(mode),
      connector_(connector),
      ops_(ops),
      pending_(transport::kMaxStages),
      timings_(static_cast<size_t>(config.num_hidden_layers)),
      step_timings_(static_cast<size_t>(config.num_hidden_layers)) {
    if (mode == transport::AfdMode::kM2n) {
        auto partition = transport::ExpertPartition::create(config.num_experts, topology.numFfnRanks());
        AFD_CHECK_OK(partition.status());
        for (const auto& peer : connector.peers()) peer_ranges_.push_back(partition->rangeOf(peer.rank));
        auto local = createLocalMlpOps(config, weights, ops);
        AFD_CHECK_OK(local.status());
        local_ = std::move(local).value();
    }
}

void RemoteMlpBackend::reserve(const StepLimits& limits) {
    if (local_ != nullptr) local_->reserve(limits.max_tokens);
}

void RemoteMlpBackend::addCompute(int64_t layer, double seconds) {
    timings_[static_cast<size_t>(layer)].compute_seconds += seconds;
    step_timings_[static_cast<size_t>(layer)].compute_seconds += seconds;
}

void RemoteMlpBackend::addSend(int64_t layer, double seconds) {
    for (auto* t : {&timings_[static_cast<size_t>(layer)], &step_timings_[static_cast<size_t>(layer)]}) {
        t->send_seconds += seconds;
        t->transfer_seconds += seconds;
    }
}

void RemoteMlpBackend::addReceive(int64_t layer, double seconds) {
    for (auto* t : {&timings_[static_cast<size_t>(layer)], &step_timings_[static_cast<size_t>(layer)]}) {
        t->receive_seconds += seconds;
        t->transfer_seconds += seconds;
    }
}

bool RemoteMlpBackend::crosses(int64_t layer) const {
    return mode_ == transport::AfdMode::kP2p || config_.isMoeLayer(layer);
}

core::Status RemoteMlpBackend::beginStep(const StepPlan& plan) {
    std::fill(step_timings_.begin(), step_timings_.end(), LayerTiming{});
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

core::Status RemoteMlpBackend::dispatchM2n(int64_t layer, int stage, const core::Tensor& x_tensor, PendingStage& p) {
    const int64_t H = config_.hidden_size;
    const int64_t K = config_.num_experts_per_tok;
    const int64_t T = p.num_tokens;
    const auto router_start = std::chrono::steady_clock::now();
    const core::Tensor ids = hostRows(ops_, router_ids_, T, K, core::DType::kI32);
    const core::Tensor weights = hostRows(ops_, router_weights_, T, K);
    if (T > 0) local_->route(layer, x_tensor, ids, weights);
    addCompute(layer, secondsSince(router_start));
    // The hidden rows the frames carry; staging them waits for the router's ids and weights too.
    const auto send_start = std::chrono::steady_clock::now();
    const float* x = stageIn(p, x_tensor);
    const int32_t* router_ids = ids.data<int32_t>();
    const float* router_weights = weights.data<float>();
    // Rows for each FFN peer: the tokens with at least one expert in its range.
    const size_t num_peers = peer_ranges_.size();
    p.tokens.assign(num_peers, {});
    for (size_t k = 0; k < num_peers; ++k) {
        const auto range = peer_ranges_[k];
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t j = 0; j < K; ++j) {
                const int32_t e = router_ids[t * K + j];
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
                const int32_t e = router_ids[t * K + j];
                const bool here = e >= range.begin && e < range.end;
                p.send_ids[static_cast<size_t>(row * K + j)] = here ? static_cast<int32_t>(e - range.begin) : -1;
                p.send_weights[static_cast<size_t>(row * K + j)] = here ? router_weights[t * K + j] : 0.0f;
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
    const core::Status sent =
        connector_.dispatch({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)}, p.payloads);
    addSend(layer, secondsSince(send_start));
    return sent;
}

const float* RemoteMlpBackend::stageIn(PendingStage& p, const core::Tensor& x) {
    const auto* rows = static_cast<const float*>(x.rawData());
    if (!isHostF32(x)) {
        const core::Tensor host_x = hostRows(ops_, p.in_staging, p.num_tokens, config_.hidden_size);
        ops_.copy(x, host_x);
        rows = host_x.data<float>();
    }
    ops_.synchronize();
    return rows;
}

float* RemoteMlpBackend::hostOut(PendingStage& p) {
    p.host_out = isHostF32(p.out) ? p.out : hostRows(ops_, p.out_staging, p.num_tokens, config_.hidden_size);
    return p.host_out.data<float>();
}

void RemoteMlpBackend::stageOut(PendingStage& p) {
    if (isHostF32(p.out)) return;  // assembled in place
    ops_.copy(p.host_out, p.out);
    // NOTE: waited for here so that the staging rows (and the connector's receive buffers) are free at once.
    ops_.synchronize();
}

core::Status RemoteMlpBackend::submit(int64_t layer, int stage, const core::Tensor& x_tensor, const core::Tensor& out) {
    AFD_CHECK(stage >= 0 && stage < static_cast<int>(pending_.size()), "stage {} out of range", stage);
    const int64_t H = config_.hidden_size;
    AFD_CHECK(x_tensor.dim() == 2 && x_tensor.size(1) == H && out.shape() == x_tensor.shape(),
              "RemoteMlpBackend: x {} and out {} must be [n, {}]", core::shapeToString(x_tensor.shape()),
              core::shapeToString(out.shape()), H);
    PendingStage& p = pending_[static_cast<size_t>(stage)];
    p.layer = layer;
    p.remote = crosses(layer);
    p.num_tokens = x_tensor.size(0);
    p.out = out;
    if (!p.remote) {
        // A dense layer of an m2n rank: on the ops' device, in order with the ops.
        const auto start = std::chrono::steady_clock::now();
        if (p.num_tokens > 0) local_->denseMlp(layer, x_tensor, out);
        addCompute(layer, secondsSince(start));
        return core::Status::ok();
    }
    ++timings_[static_cast<size_t>(layer)].num_crossings;
    ++step_timings_[static_cast<size_t>(layer)].num_crossings;
    if (mode_ == transport::AfdMode::kM2n) return dispatchM2n(layer, stage, x_tensor, p);
    const auto send_start = std::chrono::steady_clock::now();
    const float* x = stageIn(p, x_tensor);
    const int64_t num_tokens = p.num_tokens;
    p.payloads.assign(1, {});
    p.payloads[0].rows = static_cast<uint32_t>(num_tokens);
    p.payloads[0].segments = {core::Tensor::view(const_cast<float*>(x), core::DType::kF32, {num_tokens, H})};
    const core::Status sent =
        connector_.dispatch({step_, static_cast<uint32_t>(layer), static_cast<uint32_t>(stage)}, p.payloads);
    addSend(layer, secondsSince(send_start));
    return sent;
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
    const auto peers = connector_.peers();
    if (mode_ == transport::AfdMode::kP2p) {
        if (frames[0].rows != p.num_tokens) {
            return core::mismatch("{}: layer {} stage {}: {} rows back for {} sent", peers[0].describe(), layer, stage,
                                  frames[0].rows, p.num_tokens);
        }
        // The frame's rows go straight to the runner's output (converted and copied when it is not FP32 host).
        const core::Tensor& rows = frames[0].segments[0];
        AFD_CHECK(rows.dtype() == core::DType::kF32 && rows.numel() == p.num_tokens * H, "bad p2p frame segment");
        ops_.copy(rows, p.out);
        ops_.synchronize();
        addReceive(layer, secondsSince(start));
        return core::Status::ok();
    }
    // The combine: each token's MoE output is the sum of its FFN ranks' partial sums, in rank order.
    float* out = hostOut(p);
    std::fill(out, out + p.num_tokens * H, 0.0f);
    for (size_t k = 0; k < frames.size(); ++k) {
        if (frames[k].rows != p.tokens[k].size()) {
            return core::mismatch("{}: layer {} stage {}: {} rows back for {} sent", peers[k].describe(), layer, stage,
                                  frames[k].rows, p.tokens[k].size());
        }
        const auto* partial = static_cast<const float*>(frames[k].segments[0].rawData());
        for (size_t i = 0; i < p.tokens[k].size(); ++i) {
            float* dst = out + p.tokens[k][i] * H;
            const float* src = partial + static_cast<int64_t>(i) * H;
            for (int64_t h = 0; h < H; ++h) dst[h] += src[h];
        }
    }
    stageOut(p);
    addReceive(layer, secondsSince(start));
    return core::Status::ok();
}

core::Status RemoteMlpBackend::endStep() { return core::Status::ok(); }

core::Status RemoteMlpBackend::resetAfterFailedStep() {
    return core::peerLost("the AFD connection to the FFN peers cannot carry another step after step {} failed", step_);
}

}  // namespace afd::attention
