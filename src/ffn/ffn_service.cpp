#include "ffn/ffn_service.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/env.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/signal_watcher.h"
#include "ffn/compute_factory.h"
#include "ffn/ffn_runner.h"
#include "ffn/ffn_worker.h"
#include "ffn/session_ledger.h"
#include "ffn/status_file.h"
#include "http/admin_auth.h"
#include "http/http_server.h"
#include "model/checkpoint.h"
#include "model/fingerprint.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/afd_config.h"
#include "transport/connector_factory.h"
#include "transport/rendezvous_store.h"

#include "ffn/ffn_service_impl.h"

namespace afd::ffn {
namespace detail {
namespace {

// What a device connector's teardown released, for the status file: its device buffers, and cuda_ipc's mappings of
// the peers' memory or nccl's communicators.
std::string deviceConnectorReleased(transport::ConnectorKind kind) {
    return kind == transport::ConnectorKind::kNccl
               ? std::string("nccl device buffers and communicators released")
               : fmt::format("{} device buffers and IPC mappings released", transport::connectorName(kind));
}

// Reads RANK-style variables: the flag when given, else the environment variable; errors name both.
core::Result<int> rankVariable(const std::optional<int>& flag, const char* env, const char* flag_name, bool required,
                               int fallback) {
    if (flag) return *flag;
    const char* text = std::getenv(env);
    if (text == nullptr) {
        if (required)
            return core::invalidArgument("{} is not set (set the environment variable or pass {})", env, flag_name);
        return fallback;
    }
    int value = 0;
    const std::string_view sv(text);
    auto [ptr, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), value);
    if (sv.empty() || ec != std::errc() || ptr != sv.data() + sv.size()) {
        return core::invalidArgument("{}={:?} is not an integer", env, sv);
    }
    return value;
}

}  // namespace

std::string_view stateName(State s) {
    switch (s) {
        case State::kStarting:
            return "starting";
        case State::kLoading:
            return "loading";
        case State::kConnecting:
            return "connecting";
        case State::kWaitingForSession:
            return "waiting_for_session";
        case State::kServing:
            return "serving";
        case State::kSessionEnded:
            return "session_ended";
        case State::kStopping:
            return "stopping";
    }
    return "unknown";
}

int Service::fail(std::string reason, int code, const Status& error) {
    AFD_LOG_ERROR("{}", error.message());
    report_.exit_reason = std::move(reason);
    report_.exit_code = code;
    report_.error = error.message();
    return code;
}

void Service::wake() {
    {
        std::lock_guard lock(mutex_);
        woken_ = true;
    }
    cv_.notify_all();
}

void Service::requestStop(std::string_view why) {
    {
        std::lock_guard lock(mutex_);
        if (!stop_requested_) {
            stop_requested_ = true;
            stop_reason_ = why;
            AFD_LOG_INFO("stop requested ({})", why);
        }
        woken_ = true;
    }
    if (setup_cancel_) setup_cancel_->cancel();
    cv_.notify_all();
}

Status Service::configure() {
    AFD_ASSIGN_OR_RETURN(auto afd, transport::resolveAfdConfig(options_.additional_config, options_.afd_config_file,
                                                               transport::Role::kFfn));
    if (!afd)
        return core::invalidArgument(
            "afd ffn needs an AFD config: --additional-config '{{\"afd\": {{...}}}}' or --afd-config FILE");
    afd_ = *afd;
    AFD_ASSIGN_OR_RETURN(world_size_, rankVariable(options_.world_size, "WORLD_SIZE", "--world-size", true, 0));
    AFD_ASSIGN_OR_RETURN(rank_, rankVariable(options_.rank, "RANK", "--rank", true, 0));
    AFD_ASSIGN_OR_RETURN(local_rank_, rankVariable(options_.local_rank, "LOCAL_RANK", "--local-rank", false, rank_));
    if (world_size_ != afd_.num_ffn_ranks) {
        return core::invalidArgument("WORLD_SIZE={} must equal afd.num_ffn_ranks={} (the FFN world is the FFN ranks)",
                                     world_size_, afd_.num_ffn_ranks);
    }
    if (rank_ < 0 || rank_ >= world_size_) {
        return core::invalidArgument("RANK={} must be in [0, WORLD_SIZE={})", rank_, world_size_);
    }
    if (local_rank_ < 0) return core::invalidArgument("LOCAL_RANK={} must be >= 0", local_rank_);
    AFD_ASSIGN_OR_RETURN(gpu_, resolveDevice(options_.device, options_.device_ids, local_rank_));
    // The connector is checked against this build and the device before the model directory is even looked at.
    AFD_RETURN_IF_ERROR(transport::checkConnectorUsable(afd_, transport::Role::kFfn, device()));
    if (options_.shutdown_timeout_s < 1) {
        return core::invalidArgument("--shutdown-timeout {} must be >= 1 second", options_.shutdown_timeout_s);
    }
    if (options_.random_weights && gpu_ < 0) {
        return core::invalidArgument(
            "--random-weights draws the weights on a GPU: add --device cuda (for the CPU, write the same weights with "
            "`afd gen-model --seed {}`)",
            options_.weights_seed);
    }
    report_.rank = rank_;
    report_.serve_sessions = options_.serve_sessions;
    core::setLogTag(fmt::format("ffn:{}", rank_));
    std::error_code ec;
    if (!std::filesystem::is_directory(options_.model_dir, ec)) {
        return core::invalidArgument("model directory {} does not exist", options_.model_dir);
    }
    AFD_ASSIGN_OR_RETURN(model_config_, model::ModelConfig::fromFile(
                                            (std::filesystem::path(options_.model_dir) / "config.json").string()));
    if (afd_.mode() == transport::AfdMode::kM2n) {
        if (model_config_.numMoeLayers() == 0) {
            return core::invalidArgument("m2n (compute_gate_on_attention) needs MoE layers; {} has none",
                                         options_.model_dir);
        }
        AFD_ASSIGN_OR_RETURN(auto partition,
                             transport::ExpertPartition::create(model_config_.num_experts, afd_.num_ffn_ranks));
        experts_ = partition.rangeOf(rank_);
    } else {
        experts_ = {0, static_cast<int>(model_config_.num_experts)};  // num_experts is validated to fit an int
    }
    report_.expert_begin = experts_.begin;
    report_.expert_end = experts_.end;
    if (options_.admin_port >= 0) {
        AFD_ASSIGN_OR_RETURN(admin_token_, http::resolveAdminToken(options_.admin_host, options_.admin_token));
    }
    AFD_ASSIGN_OR_RETURN(test_load_delay_ms_, core::envInt("AFD_TEST_LOAD_DELAY_MS", 0, 0, 60000));
    AFD_LOG_INFO("effective AFD config: {}", afd_.toJson());
    return Status::ok();
}

Status Service::load() {
    num_layers_ = model_config_.num_hidden_layers;
    state_ = State::kLoading;
    const auto start = std::chrono::steady_clock::now();
    if (options_.random_weights) {
        model_fingerprint_ = model::randomModelFingerprint(model_config_, options_.weights_seed);
    } else {
        AFD_ASSIGN_OR_RETURN(model::Checkpoint checkpoint, model::Checkpoint::open(options_.model_dir));
        checkpoint_.emplace(std::move(checkpoint));
        AFD_ASSIGN_OR_RETURN(model_fingerprint_, model::modelFingerprint(model_config_, *checkpoint_));
    }
    fingerprint_ = connectorRequest().deploymentFingerprint();
    const auto selection =
        model::WeightSelection::ffnRole(afd_.compute_gate_on_attention, model_config_, experts_.begin, experts_.end);
    // One call carries at most every peer's full stage.
    const int64_t max_rows =
        static_cast<int64_t>(afd_.topology().attentionPeersOfFfn(rank_).size()) * afd_.max_num_tokens;
    AFD_RETURN_IF_ERROR(checkFfnComputeFits(options_.device, gpu_, model_config_, selection, max_rows));
    // A device connector hands the compute device rows (one lane per stage it may serve at once).
    const auto capabilities = transport::connectorCapabilities(afd_.connector);
    // nccl orders one communicator's operations as posted, so two-stage steps need the second lane whether or not
    // --enable-dbo asked for it (the stages' frames would otherwise wait on each other).
    const bool two_lanes = options_.enable_dbo || afd_.connector == transport::ConnectorKind::kNccl;
    const int device_lanes = capabilities && capabilities->needsCudaDevice() ? (two_lanes ? 2 : 1) : 0;
    if (options_.random_weights) {
        AFD_ASSIGN_OR_RETURN(
            compute_, createRandomFfnCompute(options_.device, gpu_, model_config_, selection, options_.weights_seed,
                                             max_rows, device_lanes, options_.enforce_eager));
        weight_bytes_ = compute_->deviceWeightBytes();
        layers_loaded_ = model_config_.num_hidden_layers;
        report_.weight_bytes = weight_bytes_;
        loaded_ = true;
        AFD_LOG_INFO("drew {} bytes of random weights (seed {}, experts [{}, {}) of {}, {} mode) on {} in {:.2f} s",
                     weight_bytes_, options_.weights_seed, experts_.begin, experts_.end, model_config_.num_experts,
                     afd_.compute_gate_on_attention ? "m2n" : "p2p", compute_->describe(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        return Status::ok();
    }
    int64_t last_tenth = 0;
    // A stop (SIGTERM, SIGINT, POST /stop) ends the load after the layer in hand.
    const model::LoadProgress progress = [&](int64_t done, int64_t total) {
        if (test_load_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_load_delay_ms_));
        layers_loaded_ = done;
        if (stopped()) return false;
        // A line at each tenth: a long load shows that it moves (and /status has every layer).
        const int64_t tenth = total > 0 ? 10 * done / total : 10;
        if (tenth > last_tenth && done < total) {
            last_tenth = tenth;
            AFD_LOG_INFO("loading weights: {}/{} layers ({}%) in {:.1f} s", done, total, 100 * done / total,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        return true;
    };
    AFD_ASSIGN_OR_RETURN(model::ModelWeights weights,
                         model::loadWeights(*checkpoint_, model_config_, selection, progress));
    weight_bytes_ = weights.checkpoint_bytes;
    AFD_ASSIGN_OR_RETURN(compute_, createFfnCompute(options_.device, gpu_, model_config_, std::move(weights), max_rows,
                                                    device_lanes, options_.enforce_eager));
    report_.weight_bytes = weight_bytes_;
    loaded_ = true;
    AFD_LOG_INFO("loaded {} bytes of weights (experts [{}, {}) of {}, {} mode) onto {} in {:.2f} s", weight_bytes_,
                 experts_.begin, experts_.end, model_config_.num_experts,
                 afd_.compute_gate_on_attention ? "m2n" : "p2p", compute_->describe(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return Status::ok();
}

nlohmann::json Service::statusJson() const {
    nlohmann::json j;
    j["role"] = "ffn";
    j["rank"] = rank_;
    j["world_size"] = world_size_;
    j["local_rank"] = local_rank_;
    j["state"] = stateName(state_.load());
    const bool loaded = loaded_.load();
    j["device"] = loaded && compute_ ? compute_->describe() : options_.device;
    j["model"] = options_.model_dir;
    j["fingerprint"] = loaded ? fingerprint_ : std::string();
    j["expert_range"] = {experts_.begin, experts_.end};
    j["weight_bytes"] = loaded ? weight_bytes_ : 0;
    j["load"] = {{"layers_done", layers_loaded_.load()}, {"num_layers", num_layers_.load()}, {"done", loaded}};
    j["afd"] = nlohmann::json::parse(afd_.toJson());
    j["serve_sessions"] = serveSessionsName(options_.serve_sessions);
    j["sessions"] = sessionSummaryJson(sessions_.summary());
    std::lock_guard lock(session_mutex_);
    const FfnRunnerStats stats = runner_ ? runner_->stats() : last_stats_;
    const std::vector<int64_t>& crossing = runner_ ? runner_->crossingLayers() : last_layers_;
    j["steps"] = stats.steps;
    j["tokens"] = stats.tokens;
    if (!crossing.empty()) {
        nlohmann::json layers = nlohmann::json::array();
        for (size_t i = 0; i < crossing.size(); ++i) {
            layers.push_back({{"layer", crossing[i]},
                              {"compute_seconds", stats.layer_compute_seconds[i]},
                              {"wait_seconds", stats.layer_wait_seconds[i]}});
        }
        j["layers"] = layers;
    }
    return j;
}

// Binds the admin port before any weight is read, so that a taken port fails the start at once; it serves from
// before the load on (startAdmin), so that /status shows the load's progress.
Status Service::bindAdmin() {
    if (options_.admin_port < 0) return Status::ok();
    http::HttpServerOptions options;
    options.name = "admin HTTP server";
    options.host = options_.admin_host;
    options.port = options_.admin_port;
    options.num_threads = 4;  // requests are short; a launcher polls one at a time
    admin_ = std::make_unique<http::HttpServer>(options);
    const auto plain = [](int status, std::string body) {
        http::HttpReply reply = http::HttpReply::text(status, std::move(body));
        reply.content_type = "text/plain";
        return reply;
    };
    admin_->addRoute("GET", "/health", [this, plain](const http::HttpRequest&) {
        return plain(200, fmt::format("ok {}\n", stateName(state_.load())));
    });
    admin_->addRoute("GET", "/ready", [this, plain](const http::HttpRequest&) {
        const State s = state_.load();
        return s == State::kServing ? plain(200, "ready\n") : plain(503, std::string(stateName(s)) + "\n");
    });
    admin_->addRoute("POST", "/stop", [this](const http::HttpRequest& request) {
        if (auto refused = http::checkBearerToken(request, admin_token_)) {
            AFD_LOG_WARN("POST /stop from {} refused: {}", request.remote_address,
                         request.header("authorization") ? "wrong admin token" : "no admin token");
            return *refused;
        }
        requestStop("POST /stop");
        return http::HttpReply::json(200, "{\"stopping\":true}\n");
    });
    admin_->addRoute("GET", "/status", [this](const http::HttpRequest&) {
        return http::HttpReply::json(200, statusJson().dump() + "\n");
    });
    admin_->addRoute("GET", "/metrics", [](const http::HttpRequest&) {
        http::HttpReply reply = http::HttpReply::text(200, core::globalMetrics().render());
        reply.content_type = std::string(core::MetricsRegistry::kContentType);
        return reply;
    });
    return admin_->bind().withContext(
        fmt::format("--admin-port {} (--admin-host {})", options_.admin_port, options_.admin_host));
}

// Rank 0 hosts the rendezvous store (DESIGN.md §5: the service owns it) from before the load on: a taken afd.port
// fails the start before any weight is read, and peers that come early find the store up.
Status Service::hostRendezvousStore() {
    if (rank_ != 0) return Status::ok();
    core::Result<std::unique_ptr<transport::StoreServer>> store = transport::StoreServer::start(afd_.host, afd_.port);
    if (!store.isOk()) {
        return core::invalidArgument("afd.port {} (afd.host {}): ffn rank 0 cannot host the rendezvous store there: {}",
                                     afd_.port, afd_.host, store.status().message());
    }
    store_ = std::move(store).value();
    return Status::ok();
}

Status Service::startAdmin() {
    if (!admin_) return Status::ok();
    AFD_RETURN_IF_ERROR(admin_->start());
    if (!admin_token_.empty()) AFD_LOG_INFO("admin POST /stop needs \"Authorization: Bearer <admin token>\"");
    if (!options_.admin_port_file.empty()) {
        const std::string tmp = options_.admin_port_file + ".tmp";
        {
            std::ofstream out(tmp, std::ios::trunc);
            out << admin_->port() << "\n";
            if (!out) return core::ioError("cannot write {}", tmp);
        }
        std::error_code ec;
        std::filesystem::rename(tmp, options_.admin_port_file, ec);
        if (ec) return core::ioError("cannot write {}: {}", options_.admin_port_file, ec.message());
    }
    return Status::ok();
}

transport::ConnectorRequest Service::connectorRequest() const {
    transport::ConnectorRequest request;
    request.afd = afd_;
    request.role = transport::Role::kFfn;
    request.rank = rank_;
    request.device = device();
    request.model_fingerprint = model_fingerprint_;
    request.hidden_size = model_config_.hidden_size;
    request.experts_per_token = model_config_.num_experts_per_tok;
    request.setup_cancel = setup_cancel_.get();
    request.rendezvous_store_started = store_ != nullptr;
    return request;
}
int Service::shutdown() {
    state_ = State::kStopping;
    std::vector<std::string> released;
    bool all_released = true;
    if (worker_) {
        worker_->requestStop();
        if (worker_->join(std::chrono::seconds(options_.shutdown_timeout_s))) {
            released.push_back("worker joined");
        } else {
            // The loop is stuck somewhere the connector could not interrupt: its thread still uses the runner
            // and the connector, so they cannot be released. Report and leave the process now.
            report_.exit_reason = "internal_error";
            report_.exit_code = core::kExitInternal;
            report_.error = fmt::format("the step loop did not stop within {} s", options_.shutdown_timeout_s);
            report_.resources_released = false;
            report_.released_detail = "worker did not join; nothing released";
            AFD_LOG_ERROR("{}", report_.error);
            if (!options_.status_file.empty()) (void)writeStatusFile(options_.status_file, report_);
            std::_Exit(core::kExitInternal);
        }
    }
    {
        const FfnRunnerStats stats = runnerStats();
        report_.steps = stats.steps;
        report_.tokens = stats.tokens;
    }
    if (connector_) {
        connector_->close();
        released.push_back("connector closed");
    }
    if (store_) {
        store_.reset();
        released.push_back("rendezvous store stopped");
    }
    if (compute_) {
        compute_->release();
        released.push_back(fmt::format("{} weights released", compute_->describe()));
    }
    if (admin_) {
        admin_->stop();
        released.push_back("admin HTTP stopped");
    }
    if (connector_) {
        // The worker has joined and the admin server, the one other caller of the worker, has stopped: the
        // connector's memory (a device connector's inbox and its mappings of the peers' inboxes) goes now.
        const auto capabilities = transport::connectorCapabilities(afd_.connector);
        {
            std::lock_guard lock(session_mutex_);
            worker_.reset();
            runner_.reset();
        }
        connector_.reset();
        if (capabilities && capabilities->needsCudaDevice()) {
            released.push_back(deviceConnectorReleased(afd_.connector));
        }
    }
    if (sessions_released_ > 0) {
        const auto capabilities = transport::connectorCapabilities(afd_.connector);
        const bool device = capabilities && capabilities->needsCudaDevice();
        released.push_back(fmt::format("{} ended session(s): worker joined, connector closed{}", sessions_released_,
                                       device ? ", " + deviceConnectorReleased(afd_.connector) : ""));
    }
    report_.resources_released = all_released;
    report_.released_detail = fmt::format("{}", fmt::join(released, ", "));
    return report_.exit_code;
}

int Service::run() {
    // The canceller exists before the signal thread that may use it; the signal thread is joined (signals_.reset()
    // below) before any member it touches is destroyed.
    auto canceller = transport::Canceller::create();
    if (!canceller.isOk()) return fail("internal_error", core::kExitInternal, canceller.status());
    setup_cancel_ = std::move(canceller).value();
    auto signals =
        core::SignalWatcher::create([this](int signal) { requestStop(signal == SIGTERM ? "SIGTERM" : "SIGINT"); });
    if (!signals.isOk()) return fail("internal_error", core::kExitInternal, signals.status());
    signals_ = std::move(signals).value();

    int code = core::kExitOk;
    if (Status s = configure(); !s.isOk()) {
        code = fail("config_error", core::kExitBadConfig, s);
    } else if (Status s = bindAdmin(); !s.isOk()) {
        code = fail("config_error", core::kExitBadConfig, s);
    } else if (Status s = hostRendezvousStore(); !s.isOk()) {
        code = fail("config_error", core::kExitBadConfig, s);
    } else if (Status s = startAdmin(); !s.isOk()) {
        code = fail("config_error", core::kExitBadConfig, s);
    } else if (Status s = load(); !s.isOk()) {
        if (s.code() == core::StatusCode::kCancelled && stopped()) {
            AFD_LOG_INFO("{}", s.message());
            report_.exit_reason = "stopped";
        } else {
            code = fail(core::exitCodeFor(s) == core::kExitBadConfig ? "config_error" : "load_error",
                        core::exitCodeFor(s), s);
        }
    } else {
        code = serveSessions();
    }
    report_.exit_code = code;
    code = shutdown();
    report_.state = "exited";
    report_.sessions = sessions_.summary();
    if (!options_.status_file.empty()) {
        if (Status s = writeStatusFile(options_.status_file, report_); !s.isOk()) AFD_LOG_ERROR("{}", s.message());
    }
    AFD_LOG_INFO("exit {} ({}){}", code, report_.exit_reason, report_.error.empty() ? "" : ": " + report_.error);
    signals_.reset();
    return code;
}

}  // namespace detail

int runFfnService(const FfnServiceOptions& options) {
    detail::Service service(options);
    try {
        return service.run();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("internal error: {}", e.what());
        return core::kExitInternal;
    }
}

}  // namespace afd::ffn
