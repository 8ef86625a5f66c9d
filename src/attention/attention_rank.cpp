#include "attention/attention_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "attention/device_ops_factory.h"
#include "attention/local_mlp_backend.h"
#include "attention/remote_mlp_backend.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "attention/cuda/device_remote_mlp_backend.h"
#endif
#include "attention/weights_loading.h"
#include "core/check.h"
#include "core/logging.h"
#include "model/fingerprint.h"
#include "transport/connector_factory.h"

namespace afd::attention {

int64_t defaultMaxNumBatchedTokens(const std::optional<transport::AfdConfig>& afd) {
    constexpr int64_t kDefault = 2048;
    return afd ? std::min<int64_t>(kDefault, afd->max_num_tokens) : kDefault;
}

core::Result<std::unique_ptr<AttentionRank>> AttentionRank::configure(ModelSource source,
                                                                      AttentionRankOptions options) {
    std::unique_ptr<AttentionRank> rank(new AttentionRank());
    rank->source_ = std::move(source);
    rank->options_ = std::move(options);
    rank->engine_options_ = rank->options_.engine;
    const ModelSource& src = rank->source_;
    const AttentionRankOptions& o = rank->options_;
    const model::ModelConfig& config = src.config;
    AFD_RETURN_IF_ERROR(rank->engine_options_.validate());
    AFD_RETURN_IF_ERROR(checkWeightsDevice(src, o.device));
    if (!o.afd) return rank;
    const transport::AfdConfig& afd = *o.afd;
    if (o.attention_rank < 0 || o.attention_rank >= afd.num_attention_ranks) {
        return core::invalidArgument("--attention-rank {} must be in [0, afd.num_attention_ranks={})", o.attention_rank,
                                     afd.num_attention_ranks);
    }
    AFD_RETURN_IF_ERROR(transport::checkConnectorUsable(afd, transport::Role::kAttention, o.device));
    if (rank->engine_options_.scheduler.max_num_batched_tokens > afd.max_num_tokens) {
        return core::invalidArgument(
            "--max-num-batched-tokens {} exceeds afd.max_num_tokens {} (the most tokens a frame may carry)",
            rank->engine_options_.scheduler.max_num_batched_tokens, afd.max_num_tokens);
    }
    if (afd.compute_gate_on_attention && config.numMoeLayers() == 0) {
        return core::invalidArgument("m2n (compute_gate_on_attention) needs MoE layers; {} has none", src.name);
    }
    if (afd.compute_gate_on_attention && config.num_experts < afd.num_ffn_ranks) {
        return core::invalidArgument("afd.num_ffn_ranks {} exceeds the model's {} experts", afd.num_ffn_ranks,
                                     config.num_experts);
    }
    core::setLogTag(fmt::format("attention:{}", o.attention_rank));
    return rank;
}

core::Status AttentionRank::load() {
    AFD_CHECK(state_ == State::kConfigured, "AttentionRank::load out of order");
    const model::ModelConfig& config = source_.config;
    const core::Device device = options_.device;
    const bool gpu = !device.isCpu();
    const bool afd = isAfd();
    if (afd && source_.random_weights) {
        // Every rank draws its share of the same random weights from the seed (the FFN ranks' `--random-weights`).
        model_fingerprint_ = model::randomModelFingerprint(config, source_.weights_seed);
    } else if (afd) {
        AFD_ASSIGN_OR_RETURN(model_fingerprint_, model::modelFingerprint(config, *source_.checkpoint));
    }
    AFD_ASSIGN_OR_RETURN(ops_, createDeviceOps(device, options_.cpu_precision));
    const uint64_t beside = gpu ? engineWorkspaceBytes(config, engine_options_) +
                                      minimumKvBytes(config, engine_options_, options_.gpu.kv_given)
                                : 0;
    const model::WeightSelection selection =
        afd ? model::WeightSelection::attentionRole(options_.afd->compute_gate_on_attention)
            : model::WeightSelection::everything(config);
    AFD_ASSIGN_OR_RETURN(weights_, weightsForDevice(source_, selection, device, beside, options_.on_load_progress));
    if (!afd) {
        AFD_ASSIGN_OR_RETURN(backend_, createLocalMlpBackend(config, weights_, *ops_));
        if (options_.wrap_backend) {
            AFD_ASSIGN_OR_RETURN(backend_, options_.wrap_backend(std::move(backend_), config, weights_, *ops_));
        }
    }
    if (gpu && !options_.gpu.kv_given) {
        AFD_RETURN_IF_ERROR(sizeGpuKvCache(config, device.index, options_.gpu.gpu_memory_utilization, engine_options_));
    }
    state_ = State::kLoaded;
    return core::Status::ok();
}

transport::ConnectorRequest AttentionRank::connectorRequest() const {
    transport::ConnectorRequest request;
    request.afd = *options_.afd;
    request.role = transport::Role::kAttention;
    request.rank = options_.attention_rank;
    request.device = options_.device;
    request.model_fingerprint = model_fingerprint_;
    request.hidden_size = source_.config.hidden_size;
    request.experts_per_token = source_.config.num_experts_per_tok;
    request.setup_cancel = options_.setup_cancel;
    return request;
}

core::Status AttentionRank::connect() {
    AFD_CHECK(state_ == State::kLoaded, "AttentionRank::connect out of order");
    if (isAfd()) {
        const transport::ConnectorRequest request = connectorRequest();
        AFD_ASSIGN_OR_RETURN(connector_, options_.connector_factory ? options_.connector_factory(request)
                                                                    : transport::makeAttentionConnector(request));
        AFD_CHECK(connector_ != nullptr, "the connector factory returned no connector");
        AFD_LOG_INFO("connected to {} FFN peer(s)", connector_->peers().size());
    }
    state_ = State::kConnected;
    return core::Status::ok();
}

core::Status AttentionRank::startEngine() {
    AFD_CHECK(state_ == State::kConnected, "AttentionRank::startEngine out of order");
    const model::ModelConfig& config = source_.config;
    if (isAfd()) {
        const transport::AfdConfig& afd = *options_.afd;
        const auto capabilities = transport::connectorCapabilities(afd.connector);
        if (capabilities && capabilities->needsCudaDevice()) {
#if defined(AFD_HAVE_CUDA_ATTENTION)
            try {
                backend_ = std::make_unique<DeviceRemoteMlpBackend>(config, weights_, afd.mode(), afd.topology(),
                                                                    *connector_, ops_->device().index, ops_->stream(),
                                                                    capabilities->graph_capturable);
            } catch (const core::Error& e) {
                return core::invalidArgument("the device AFD backend on {}: {}", ops_->device().toString(), e.what());
            }
#else
            return core::invalidArgument("afd.connector \"{}\" needs the GPU attention side, which this build lacks",
                                         transport::connectorName(afd.connector));
#endif
        } else {
            backend_ =
                std::make_unique<RemoteMlpBackend>(config, weights_, afd.mode(), afd.topology(), *connector_, *ops_);
        }
        if (options_.wrap_backend) {
            AFD_ASSIGN_OR_RETURN(backend_, options_.wrap_backend(std::move(backend_), config, weights_, *ops_));
        }
    }
    AFD_ASSIGN_OR_RETURN(engine_, Engine::create(config, weights_, *ops_, *backend_, engine_options_));
    state_ = State::kReady;
    return core::Status::ok();
}

core::Result<std::unique_ptr<AttentionRank>> AttentionRank::create(ModelSource source, AttentionRankOptions options) {
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<AttentionRank> rank, configure(std::move(source), std::move(options)));
    AFD_RETURN_IF_ERROR(rank->load());
    AFD_RETURN_IF_ERROR(rank->connect());
    AFD_RETURN_IF_ERROR(rank->startEngine());
    return rank;
}

EngineLoop& AttentionRank::startLoop(EngineLoopOptions options) {
    AFD_CHECK(state_ == State::kReady && loop_ == nullptr, "AttentionRank::startLoop: once, after startEngine");
    loop_ = std::make_unique<EngineLoop>(*engine_, std::move(options));
    return *loop_;
}

core::Status AttentionRank::shutdown(std::chrono::milliseconds timeout) {
    if (state_ == State::kStopped) return core::Status::ok();
    if (loop_ != nullptr) {
        if (!loop_->stop(timeout)) {
            return core::timeoutError("the engine loop did not stop within {} ms (a step is still running)",
                                      timeout.count());
        }
        loop_.reset();
    }
    core::Status finished;
    if (engine_ != nullptr) finished = engine_->finish();
    if (connector_ != nullptr) connector_->close();
    state_ = State::kStopped;
    return finished;
}

AttentionRank::~AttentionRank() {
    loop_.reset();  // stops and joins without a bound: the engine below must outlive its thread
    try {
        const core::Status s = shutdown(std::chrono::milliseconds(0));
        if (!s.isOk()) AFD_LOG_WARN("attention rank shutdown: {}", s.message());
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("attention rank shutdown: {}", e.what());
    }
}

}  // namespace afd::attention
