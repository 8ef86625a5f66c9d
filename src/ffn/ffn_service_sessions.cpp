// The FFN service's sessions (ffn_service.h): connect, serve until the session ends, end it, and (forever) again.
#include <fmt/format.h>

#include <chrono>
#include <mutex>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "ffn/ffn_service_impl.h"

namespace afd::ffn::detail {
namespace {

// How long a rank serving sessions forever waits after a session that could not be set up before it tries again.
constexpr std::chrono::seconds kSessionRetryPause(1);

}  // namespace

Status Service::connect() {
    state_ = options_.serve_sessions == ServeSessions::kForever ? State::kWaitingForSession : State::kConnecting;
    transport::ConnectorRequest request = connectorRequest();
    // Forever: between sessions the rank waits for attention ranks without a deadline (a stop still ends the wait).
    request.session.idle_until_attention = options_.serve_sessions == ServeSessions::kForever;
    request.session.on_session = [this](uint64_t session) { sessions_.began(session); };
    AFD_ASSIGN_OR_RETURN(connector_, transport::makeFfnConnector(request));
    AFD_LOG_INFO("connected to {} attention peer(s) in session {}", connector_->peers().size(),
                 sessions_.summary().current);
    return Status::ok();
}

void Service::serve() {
    FfnRunnerOptions runner_options;
    const auto capabilities = transport::connectorCapabilities(afd_.connector);
    // nccl: a step graph is captured while the attention rank runs its warm-up eagerly, and NCCL wants both ends of
    // a transfer captured alike; its step graphs wait for a multi-GPU check.
    runner_options.step_graphs = capabilities && capabilities->graph_capturable && !options_.enforce_eager &&
                                 afd_.connector != transport::ConnectorKind::kNccl;
    {
        auto runner = std::make_unique<FfnRunner>(model_config_, afd_.mode(), experts_.end - experts_.begin, *compute_,
                                                  *connector_, core::globalMetrics(), experts_.begin, runner_options);
        std::lock_guard lock(session_mutex_);
        runner_ = std::move(runner);
    }
    worker_ = std::make_unique<FfnWorker>(*runner_, *connector_, [this] { wake(); });
    state_ = State::kServing;
    worker_->start();
    const bool forever = options_.serve_sessions == ServeSessions::kForever;
    std::unique_lock lock(mutex_);
    while (true) {
        cv_.wait(lock, [&] { return woken_; });
        woken_ = false;
        if (stop_requested_) return;
        const WorkerEnd end = worker_->end();
        if (end == WorkerEnd::kAllPeersLeft && forever) return;
        if (end == WorkerEnd::kAllPeersLeft && state_ == State::kServing) {
            state_ = State::kSessionEnded;
            AFD_LOG_INFO("every attention peer has left: session ended; waiting to be stopped");
            continue;
        }
        if (end == WorkerEnd::kFailed) return;
    }
}

bool Service::stopped() const {
    std::lock_guard lock(mutex_);
    return stop_requested_;
}

void Service::pauseUnlessStopped(std::chrono::milliseconds pause) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, pause, [&] { return stop_requested_; });
}

FfnRunnerStats Service::runnerStats() const {
    std::lock_guard lock(session_mutex_);
    return runner_ ? runner_->stats() : last_stats_;
}

void Service::writeStatus() {
    if (options_.status_file.empty()) return;
    report_.state = stateName(state_.load());
    const FfnRunnerStats stats = runnerStats();
    report_.steps = stats.steps;
    report_.tokens = stats.tokens;
    report_.sessions = sessions_.summary();
    if (Status s = writeStatusFile(options_.status_file, report_); !s.isOk()) AFD_LOG_ERROR("{}", s.message());
}

int Service::failWorker(const Status& error) {
    switch (error.code()) {
        case core::StatusCode::kPeerLost:
        case core::StatusCode::kTimeout:
            return fail("peer_lost", core::kExitPeerLost, error);
        case core::StatusCode::kCorrupt:
        case core::StatusCode::kMismatch:
            return fail("protocol_error", core::kExitFailure, error);
        case core::StatusCode::kInternal:
            return fail("internal_error", core::kExitInternal, error);
        default:
            return fail("error", core::kExitFailure, error);
    }
}

Status Service::endSession() {
    if (worker_ && !worker_->join(std::chrono::seconds(options_.shutdown_timeout_s))) {
        return core::internalError("the step loop did not end within {} s", options_.shutdown_timeout_s);
    }
    // A step that failed part-way may have left work on the lanes that reads the connector's memory; the step graphs
    // name that memory, and a bad frame's record belongs to the session that failed on it.
    if (compute_->numDeviceLanes() > 0) {
        AFD_RETURN_IF_ERROR(
            compute_->resetForNextSession().withContext("waiting for the device lanes after a session"));
    }
    if (connector_) connector_->close();
    // What the runner folds into /metrics only when it renders (a p2p compute's expert token counts) is folded now,
    // before its collector goes with it.
    (void)core::globalMetrics().render();
    {
        std::lock_guard lock(session_mutex_);
        if (runner_) {
            last_stats_ = runner_->stats();
            last_layers_ = runner_->crossingLayers();
        }
        worker_.reset();
        runner_.reset();
    }
    // A device connector's buffers, mappings and communicators go with it; the next session makes its own.
    connector_.reset();
    ++sessions_released_;
    return Status::ok();
}

int Service::serveSessions() {
    const bool forever = options_.serve_sessions == ServeSessions::kForever;
    // Errors that the next session would meet again: the rank ends instead.
    const auto fatal = [](const Status& s) {
        return s.code() == core::StatusCode::kInvalidArgument || s.code() == core::StatusCode::kUnsupported ||
               s.code() == core::StatusCode::kInternal;
    };
    while (true) {
        if (stopped()) {
            report_.exit_reason = "stopped";
            return core::kExitOk;
        }
        if (Status s = connect(); !s.isOk()) {
            if (stopped() && s.code() == core::StatusCode::kCancelled) {
                report_.exit_reason = "stopped";
                return core::kExitOk;
            }
            // A rendezvous that times out is a lost peer (3), as on the attention side (core/exit_codes.h).
            if (!forever || fatal(s)) return fail("connect_error", core::exitCodeFor(s), s);
            AFD_LOG_WARN("session {} could not be set up: {}; waiting for the next session",
                         sessions_.summary().current, s.message());
            sessions_.failed(s.message());
            connector_.reset();
            writeStatus();
            pauseUnlessStopped(kSessionRetryPause);
            continue;
        }
        serve();
        const WorkerEnd end = worker_->end();
        if (stopped() && end != WorkerEnd::kFailed) {
            report_.exit_reason = "stopped";
            return core::kExitOk;
        }
        if (!forever) {
            if (end == WorkerEnd::kFailed) return failWorker(worker_->error());
            std::lock_guard lock(mutex_);
            report_.exit_reason = end == WorkerEnd::kAllPeersLeft && !stop_requested_ ? "peers_finished" : "stopped";
            return core::kExitOk;
        }
        const Status error = end == WorkerEnd::kFailed ? worker_->error() : Status::ok();
        if (!error.isOk() && (error.code() == core::StatusCode::kInternal || stopped())) {
            // A bug or a device fault (the device's state is not to be trusted), or a failure that met a stop.
            return failWorker(error);
        }
        if (Status s = endSession(); !s.isOk()) return fail("internal_error", core::kExitInternal, s);
        if (error.isOk()) {
            sessions_.finished();
            AFD_LOG_INFO("session {} finished: every attention peer has left; waiting for the next session",
                         sessions_.summary().current);
        } else {
            sessions_.failed(error.message());
            AFD_LOG_WARN("session {} failed: {}; waiting for the next session", sessions_.summary().current,
                         error.message());
        }
        state_ = State::kWaitingForSession;
        writeStatus();
    }
}

}  // namespace afd::ffn::detail
