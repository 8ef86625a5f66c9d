#include "ffn/ffn_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/check.h"
#include "transport/afd_wire.h"

namespace afd::ffn {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FfnRunner::FfnRunner(const model::ModelConfig& config, transport::AfdMode mode, int64_t num_local_experts,
                     FfnCompute& compute, transport::FfnConnector& connector, core::MetricsRegistry& metrics,
                     int64_t expert_begin, FfnRunnerOptions options)
    : config_(config),
      mode_(mode),
      num_local_experts_(num_local_experts),
      compute_(compute),
      connector_(connector),
      steps_total_(metrics.counter("afd_ffn_steps_total", "Engine steps served.")),
      tokens_total_(metrics.counter("afd_ffn_tokens_total", "Attention tokens served (sum over peers and stages).")),
      options_(options) {
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        if (mode == transport::AfdMode::kP2p || config.isMoeLayer(layer)) crossing_layers_.push_back(layer);
    }
    const bool m2n = mode == transport::AfdMode::kM2n;
    a2f_spec_ = m2n ? transport::m2nDispatchSpec(config.hidden_size, config.num_experts_per_tok)
                    : transport::hiddenSpec(config.hidden_size);
    f2a_spec_ = transport::hiddenSpec(config.hidden_size);
    for (int64_t layer : crossing_layers_) {
        const core::MetricLabels labels = {{"layer", std::to_string(layer)}};
        layer_compute_.push_back(
            &metrics.counter("afd_ffn_layer_compute_seconds_total", "Time spent computing each layer.", labels));
        layer_wait_.push_back(&metrics.counter("afd_ffn_layer_wait_seconds_total",
                                               "Time spent receiving and sending each layer's frames.", labels));
    }
    on_device_ = compute.numDeviceLanes() > 0;
    if (on_device_) {
        device_a2f_spec_ = m2n ? transport::deviceM2nDispatchSpec(config.hidden_size, config.num_experts_per_tok)
                               : transport::deviceHiddenSpec(config.hidden_size);
        device_step_seconds_ = &metrics.counter("afd_ffn_device_step_seconds_total",
                                                "Time from posting a step's layers on the GPU to their end.");
        graph_replays_ = &metrics.counter("afd_ffn_graph_replays_total", "Steps served by replaying a step graph.");
        graph_captures_ = &metrics.counter("afd_ffn_graph_captures_total", "Step graphs captured.");
        eager_steps_ = &metrics.counter("afd_ffn_eager_steps_total",
                                        "Device steps posted layer by layer (no step graph of their shape).");
    }
    routed_totals_.assign(static_cast<size_t>(num_local_experts), 0);
    if (m2n && !on_device_) {
        expert_tokens_ = std::make_unique<ExpertTokenCounters>(metrics, expert_begin, num_local_experts);
    } else if (compute.routedTokenTotals(routed_totals_)) {
        // p2p: the compute routes and counts; its totals reach the counters whenever the registry renders.
        expert_tokens_ = std::make_unique<ExpertTokenCounters>(metrics, expert_begin, num_local_experts);
        expert_tokens_->addTotals(routed_totals_);
        routed_collector_ = metrics.addCollector([this] {
            if (compute_.routedTokenTotals(routed_totals_)) expert_tokens_->addTotals(routed_totals_);
        });
    }
}

core::Result<transport::StepInfo> FfnRunner::receiveStep() { return connector_.receiveStep(); }

core::Status FfnRunner::serve(const transport::StepInfo& info) {
    uint64_t tokens = 0;
    for (const auto& peer : info.peers) {
        if (!peer.active) continue;
        for (uint32_t s = 0; s < info.num_stages; ++s) tokens += peer.stage_tokens[s];
    }
    if (on_device_) {
        AFD_RETURN_IF_ERROR(serveOnDevice(info));
    } else {
        for (int64_t layer : crossing_layers_) {
            for (uint32_t stage = 0; stage < info.num_stages; ++stage) {
                AFD_RETURN_IF_ERROR(serveStage(info, layer, stage));
            }
        }
    }
    steps_total_.inc();
    tokens_total_.inc(static_cast<double>(tokens));
    return core::Status::ok();
}

core::Status FfnRunner::serveStage(const transport::StepInfo& info, int64_t layer, uint32_t stage) {
    const size_t index = static_cast<size_t>(std::lower_bound(crossing_layers_.begin(), crossing_layers_.end(), layer) -
                                             crossing_layers_.begin());
    const transport::FrameKey key{info.step, static_cast<uint32_t>(layer), stage};
    const int64_t H = config_.hidden_size;
    const int64_t K = config_.num_experts_per_tok;
    const bool m2n = mode_ == transport::AfdMode::kM2n;

    auto wait_start = std::chrono::steady_clock::now();
    AFD_ASSIGN_OR_RETURN(std::span<const transport::ReceivedFrame> frames, connector_.receive(key, a2f_spec_));
    double wait_seconds = secondsSince(wait_start);

    // Every frame against the peer's step header: p2p carries the whole stage, m2n at most the stage's tokens.
    const auto peers = connector_.peers();
    for (size_t p = 0; p < frames.size(); ++p) {
        if (!frames[p].active) continue;
        const uint32_t announced = info.peers[p].stage_tokens[stage];
        const bool ok = m2n ? frames[p].rows <= announced : frames[p].rows == announced;
        if (!ok) {
            return core::mismatch("{}: layer {} stage {} frame has {} rows, its step header announced {} tokens ({})",
                                  peers[p].describe(), layer, stage, frames[p].rows, announced,
                                  m2n ? "at most that many" : "exactly that many");
        }
    }
    // Gather every active peer's rows into one batch, remembering where each peer's rows start.
    std::vector<int64_t> starts(frames.size() + 1, 0);
    for (size_t p = 0; p < frames.size(); ++p) starts[p + 1] = starts[p] + (frames[p].active ? frames[p].rows : 0);
    const int64_t total = starts.back();
    x_.resize(static_cast<size_t>(total * H));
    out_.resize(static_cast<size_t>(total * H));
    if (m2n) {
        ids_.resize(static_cast<size_t>(total * K));
        weights_.resize(static_cast<size_t>(total * K));
    }
    for (size_t p = 0; p < frames.size(); ++p) {
        const auto& f = frames[p];
        if (!f.active || f.rows == 0) continue;
        std::memcpy(x_.data() + starts[p] * H, f.segments[0].rawData(), f.rows * H * sizeof(float));
        if (!m2n) continue;
        const auto* ids = static_cast<const int32_t*>(f.segments[1].rawData());
        for (int64_t i = 0; i < f.rows * K; ++i) {
            if (ids[i] < -1 || ids[i] >= num_local_experts_) {
                return core::corrupt("{}: layer {} stage {} row {}: expert id {} outside [-1, {}) of this rank",
                                     peers[p].describe(), layer, stage, i / K, ids[i], num_local_experts_);
            }
        }
        std::memcpy(ids_.data() + starts[p] * K, ids, f.rows * K * sizeof(int32_t));
        std::memcpy(weights_.data() + starts[p] * K, f.segments[2].rawData(), f.rows * K * sizeof(float));
    }
    if (m2n) expert_tokens_->addLocalIds(std::span<const int32_t>(ids_.data(), static_cast<size_t>(total * K)));

    const auto compute_start = std::chrono::steady_clock::now();
    if (total > 0) {
        AFD_RETURN_IF_ERROR(
            m2n ? compute_.moePartial(layer, total, x_.data(), ids_.data(), weights_.data(), out_.data())
                : compute_.mlpBlock(layer, total, x_.data(), out_.data()));
    }
    layer_compute_[index]->inc(secondsSince(compute_start));

    std::vector<transport::FramePayload> payloads(frames.size());
    for (size_t p = 0; p < frames.size(); ++p) {
        const uint32_t rows = frames[p].active ? frames[p].rows : 0;
        payloads[p].rows = rows;
        payloads[p].segments.push_back(
            core::Tensor::view(out_.data() + starts[p] * H, core::DType::kF32, {static_cast<int64_t>(rows), H}));
    }
    wait_start = std::chrono::steady_clock::now();
    AFD_RETURN_IF_ERROR(connector_.send(key, payloads));
    wait_seconds += secondsSince(wait_start);
    layer_wait_[index]->inc(wait_seconds);
    return core::Status::ok();
}

core::Status FfnRunner::serveOnDevice(const transport::StepInfo& info) {
    const auto start = std::chrono::steady_clock::now();
    if (options_.step_graphs && info.num_stages == 1) {
        std::vector<uint32_t> shape{info.num_stages};
        for (const auto& peer : info.peers) {
            shape.push_back(peer.active ? 1 : 0);
            shape.push_back(peer.stage_tokens[0]);
        }
        if (const auto it = step_graphs_.find(shape); it != step_graphs_.end()) {
            AFD_RETURN_IF_ERROR(compute_.launchStepGraph(it->second, 0));
            graph_replays_->inc();
        } else if ((info.flags & transport::kStepCapture) != 0) {
            AFD_RETURN_IF_ERROR(compute_.beginStepCapture(0));
            const core::Status posted = postStep(info);
            AFD_ASSIGN_OR_RETURN(const int graph, compute_.endStepCapture(0, posted.isOk()));
            AFD_RETURN_IF_ERROR(posted);
            step_graphs_.emplace(shape, graph);
            graph_captures_->inc();
            AFD_RETURN_IF_ERROR(compute_.launchStepGraph(graph, 0));
        } else {
            AFD_RETURN_IF_ERROR(postStep(info));
            eager_steps_->inc();
        }
    } else {
        AFD_RETURN_IF_ERROR(postStep(info));
        eager_steps_->inc();
    }
    AFD_RETURN_IF_ERROR(compute_.synchronizeLanes());
    AFD_RETURN_IF_ERROR(connector_.deviceStatus());
    device_step_seconds_->inc(secondsSince(start));
    return core::Status::ok();
}

core::Status FfnRunner::postStep(const transport::StepInfo& info) {
    const size_t P = info.peers.size();
    const int64_t H = config_.hidden_size;
    const bool m2n = mode_ == transport::AfdMode::kM2n;
    if (active_ == nullptr) active_ = std::make_unique<bool[]>(P);
    for (size_t p = 0; p < P; ++p) active_[p] = info.peers[p].active;
    const std::span<const bool> active(active_.get(), P);
    rows_.assign(P, 0);
    payloads_.assign(P, {});
    const int lanes = compute_.numDeviceLanes();
    // Every frame of an active peer carries its whole stage (m2n too: the rows no expert here serves have ids -1).
    for (int64_t layer : crossing_layers_) {
        for (uint32_t stage = 0; stage < info.num_stages; ++stage) {
            const int lane = static_cast<int>(stage) % lanes;
            void* stream = compute_.laneStream(lane);
            const transport::FrameKey key{info.step, static_cast<uint32_t>(layer), stage};
            for (size_t p = 0; p < P; ++p) rows_[p] = info.peers[p].active ? info.peers[p].stage_tokens[stage] : 0;
            AFD_ASSIGN_OR_RETURN(std::span<const transport::ReceivedFrame> frames,
                                 connector_.postReceive(key, device_a2f_spec_, active, rows_, stream));
            peer_rows_.clear();
            for (size_t p = 0; p < P; ++p) {
                if (!frames[p].active) continue;
                DevicePeerRows r;
                r.rows = frames[p].rows;
                r.x = frames[p].segments[0].rawData();
                if (m2n) {
                    r.ids = static_cast<const int32_t*>(frames[p].segments[1].rawData());
                    r.weights = static_cast<const float*>(frames[p].segments[2].rawData());
                }
                peer_rows_.push_back(r);
            }
            AFD_RETURN_IF_ERROR(compute_.computeDevice(lane, layer, peer_rows_));
            const float* out = compute_.laneOutput(lane);
            int64_t row = 0;
            for (size_t p = 0; p < P; ++p) {
                const int64_t n = frames[p].active ? frames[p].rows : 0;
                payloads_[p].rows = static_cast<uint32_t>(n);
                payloads_[p].segments = {core::Tensor::view(const_cast<float*>(out) + row * H, core::DType::kF32,
                                                            {n, H}, core::Device::cuda(0))};
                row += n;
            }
            AFD_RETURN_IF_ERROR(connector_.postSend(key, payloads_, active, stream));
        }
    }
    return core::Status::ok();
}

FfnRunnerStats FfnRunner::stats() const {
    FfnRunnerStats s;
    s.steps = static_cast<uint64_t>(steps_total_.value());
    s.tokens = static_cast<uint64_t>(tokens_total_.value());
    for (size_t i = 0; i < crossing_layers_.size(); ++i) {
        s.layer_compute_seconds.push_back(layer_compute_[i]->value());
        s.layer_wait_seconds.push_back(layer_wait_[i]->value());
    }
    return s;
}

}  // namespace afd::ffn
