// FfnWorker: owns the FFN step loop's thread.
//
// The loop calls FfnRunner::receiveStep() and serve() until every peer has left, a stop is requested, or a step fails.
// A stop is graceful: a step in flight is given kStepGrace to finish (attention peers get their answers), then its
// waits are cancelled through the connector too (a peer that stopped sending part-way through a step, whose device
// waits would otherwise run to the step timeout); an idle wait for the next step is cancelled at once. The first error
// the loop meets (a Status, or an exception turned into a kInternal Status) is stored and surfaced by error(). `on_end`
// runs on the loop thread once, as the loop exits (the service uses it to wake its main thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/status.h"
#include "ffn/ffn_runner.h"
#include "transport/connector.h"

namespace afd::ffn {

enum class WorkerEnd { kRunning, kAllPeersLeft, kStopped, kFailed };

class FfnWorker {
public:
    FfnWorker(FfnRunner& runner, transport::FfnConnector& connector, std::function<void()> on_end);
    ~FfnWorker();  // requests a stop and joins (callers join with a bound first: see join())
    FfnWorker(const FfnWorker&) = delete;
    FfnWorker& operator=(const FfnWorker&) = delete;

    void start();
    // Thread-safe; idempotent.
    void requestStop();
    // How long join() lets a step in flight run after a stop was requested before cancelling it.
    static constexpr std::chrono::milliseconds kStepGrace{3000};

    // Waits up to `timeout` for the loop to end (cancelling a step still in flight after kStepGrace, when a stop was
    // requested), then joins its thread. False when it did not end in time (the
    // thread is then still running; the caller must not destroy the runner or connector and should exit the
    // process).
    bool join(std::chrono::milliseconds timeout);

    WorkerEnd end() const;
    core::Status error() const;

private:
    void loop(std::stop_token stop);

    FfnRunner& runner_;
    transport::FfnConnector& connector_;
    std::function<void()> on_end_;
    mutable std::mutex mutex_;
    std::condition_variable ended_cv_;
    bool idle_ = false;  // waiting for the next step header (cancel is safe)
    bool stop_requested_ = false;
    bool step_cancelled_ = false;  // join() cancelled a step in flight after the stop's grace
    WorkerEnd end_ = WorkerEnd::kRunning;
    core::Status error_;
    std::jthread thread_;
};

}  // namespace afd::ffn
