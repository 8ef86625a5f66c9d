// The FFN service's process object (ffn_service.h), shared by the two files that implement it: ffn_service.cpp (set-up,
// admin server, shutdown) and ffn_service_sessions.cpp (the sessions: connect, serve, end, again).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/metrics.h"
#include "core/signal_watcher.h"
#include "core/status.h"
#include "ffn/ffn_compute.h"
#include "ffn/ffn_runner.h"
#include "ffn/ffn_service.h"
#include "ffn/ffn_worker.h"
#include "ffn/session_ledger.h"
#include "ffn/status_file.h"
#include "http/http_server.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "transport/afd_config.h"
#include "transport/connector.h"
#include "transport/connector_factory.h"
#include "transport/rendezvous_store.h"
#include "transport/topology.h"

namespace afd::ffn::detail {

using core::Status;

// Service states as /status, /ready and /health report them. kConnecting: the one session's set-up (--serve-sessions
// once); kWaitingForSession: a session's set-up while serving sessions forever (waiting, without a deadline, for
// attention ranks to come); kSessionEnded: the one session is over, the rank waits to be stopped.
enum class State { kStarting, kLoading, kConnecting, kWaitingForSession, kServing, kSessionEnded, kStopping };

std::string_view stateName(State s);

// Everything the service shares between its main thread, the admin handlers and the worker's end callback.
class Service {
public:
    explicit Service(const FfnServiceOptions& options) : options_(options) {}
    int run();

private:
    Status configure();
    Status load();
    Status bindAdmin();
    Status hostRendezvousStore();
    Status startAdmin();
    Status connect();
    // Serves the session just connected until the worker ends (forever) or a stop (once: after every peer left, the
    // rank waits to be stopped).
    void serve();
    // The sessions, one after another (forever) or the one; returns the exit code and sets report_.exit_reason.
    int serveSessions();
    // Ends a session whose worker has ended: joins it, waits for the device lanes, releases the connector, runner and
    // worker. A failure here leaves state that cannot be reused: kInternal.
    Status endSession();
    // Waits up to `pause`, or until a stop is requested.
    void pauseUnlessStopped(std::chrono::milliseconds pause);
    bool stopped() const;
    // The exit code and reason of a failed step loop (a worker that ended kFailed).
    int failWorker(const Status& error);
    // The step counters: the live runner's, else the last session's (they are cumulative).
    FfnRunnerStats runnerStats() const;
    void writeStatus();
    // The device this rank computes on (after configure resolved it).
    core::Device device() const { return gpu_ < 0 ? core::Device::cpu() : core::Device::cuda(gpu_); }
    // What the connector factory gets (after load: the model fingerprint is known).
    transport::ConnectorRequest connectorRequest() const;
    int shutdown();

    void requestStop(std::string_view why);
    void wake();
    nlohmann::json statusJson() const;
    int fail(std::string reason, int code, const Status& error);

    const FfnServiceOptions& options_;
    std::unique_ptr<core::SignalWatcher> signals_;

    // Configuration (set by configure()).
    transport::AfdConfig afd_;
    model::ModelConfig model_config_;
    int rank_ = 0;
    int world_size_ = 0;
    int local_rank_ = 0;
    int gpu_ = -1;
    transport::ExpertRange experts_{};

    std::string admin_token_;  // empty: POST /stop needs none (loopback)
    // NOTE: AFD_TEST_LOAD_DELAY_MS, for tests only: a sleep after each layer loads, so that a test sees the `loading`
    // state of a model that loads in milliseconds (a real model that loads slowly enough to watch takes gigabytes).
    int64_t test_load_delay_ms_ = 0;

    // Resources, released in reverse order (admin_ excepted: see below).
    std::optional<model::Checkpoint> checkpoint_;
    std::string model_fingerprint_;
    std::string fingerprint_;  // the deployment's, as every rank must share it (shown by /status)
    std::unique_ptr<FfnCompute> compute_;
    uint64_t weight_bytes_ = 0;
    // NOTE: the admin handlers run while the weights load: they read what load() writes (compute_, fingerprint_,
    // weight_bytes_) only once loaded_ is true (set after those, sequentially consistent), and the progress from
    // the two atomics before.
    std::atomic<bool> loaded_{false};
    std::atomic<int64_t> layers_loaded_{0};
    std::atomic<int64_t> num_layers_{0};
    std::unique_ptr<transport::StoreServer> store_;  // rank 0: the rendezvous store, up before loading
    std::unique_ptr<transport::Canceller> setup_cancel_;
    std::unique_ptr<transport::FfnConnector> connector_;
    // Sessions whose worker, runner and connector endSession released (their device memory and mappings too).
    int sessions_released_ = 0;
    // NOTE: runner_ is set and reset under session_mutex_, which the admin thread takes to read its stats;
    // last_stats_ and last_layers_ keep the last session's for between sessions.
    mutable std::mutex session_mutex_;
    std::unique_ptr<FfnRunner> runner_;
    FfnRunnerStats last_stats_;
    std::vector<int64_t> last_layers_;
    std::unique_ptr<FfnWorker> worker_;
    SessionLedger sessions_{core::globalMetrics()};

    std::atomic<State> state_{State::kStarting};
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_requested_ = false;
    bool woken_ = false;
    std::string stop_reason_;

    ServiceStatusReport report_;
    // NOTE: declared last, so that it is destroyed (its handler threads joined) before anything its handlers use;
    // shutdown() stops it explicitly in the ordered path.
    std::unique_ptr<http::HttpServer> admin_;
};

}  // namespace afd::ffn::detail
