#include "ffn/ffn_worker.h"

#include <algorithm>
#include <exception>

#include "core/logging.h"

namespace afd::ffn {

FfnWorker::FfnWorker(FfnRunner& runner, transport::FfnConnector& connector, std::function<void()> on_end)
    : runner_(runner), connector_(connector), on_end_(std::move(on_end)) {}

FfnWorker::~FfnWorker() {
    requestStop();
    if (thread_.joinable()) thread_.join();
}

void FfnWorker::start() {
    thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
}

void FfnWorker::requestStop() {
    std::lock_guard lock(mutex_);
    if (stop_requested_) return;
    stop_requested_ = true;
    // Only an idle wait is cancelled: a step in flight finishes, so attention peers get their answers.
    if (idle_) connector_.cancel();
}

void FfnWorker::loop(std::stop_token) {
    WorkerEnd end = WorkerEnd::kFailed;
    core::Status error;
    try {
        while (true) {
            {
                std::lock_guard lock(mutex_);
                if (stop_requested_) {
                    end = WorkerEnd::kStopped;
                    break;
                }
                idle_ = true;
            }
            // NOTE: a stop requested between the header's arrival and the next line still cancels this step: the
            // window is a few instructions wide, and the peers then see a closed connection, as on any stop.
            core::Result<transport::StepInfo> info = runner_.receiveStep();
            bool stopping = false;
            {
                std::lock_guard lock(mutex_);
                idle_ = false;
                stopping = stop_requested_;
            }
            if (!info.isOk()) {
                if (info.status().code() == core::StatusCode::kCancelled && stopping) {
                    end = WorkerEnd::kStopped;
                } else {
                    error = info.status();
                }
                break;
            }
            if (info->all_left) {
                end = WorkerEnd::kAllPeersLeft;
                break;
            }
            error = runner_.serve(*info);
            if (!error.isOk()) {
                std::lock_guard lock(mutex_);
                // The stop cancelled this step (join): the loop ends as stopped, the step's failure logged.
                if (step_cancelled_) {
                    AFD_LOG_WARN("step {} cancelled by the stop: {}", info->step, error.message());
                    error = core::Status::ok();
                    end = WorkerEnd::kStopped;
                }
                break;
            }
        }
    } catch (const std::exception& e) {
        error = core::internalError("FFN step loop failed: {}", e.what());
    }
    {
        std::lock_guard lock(mutex_);
        end_ = error.isOk() ? end : WorkerEnd::kFailed;
        error_ = error;
    }
    if (!error.isOk()) AFD_LOG_ERROR("FFN step loop stopped: {}", error.message());
    ended_cv_.notify_all();
    if (on_end_) on_end_();
}

bool FfnWorker::join(std::chrono::milliseconds timeout) {
    if (!thread_.joinable()) return true;
    {
        std::unique_lock lock(mutex_);
        const auto ended = [&] { return end_ != WorkerEnd::kRunning; };
        const auto grace = std::min(timeout, kStepGrace);
        if (!ended_cv_.wait_for(lock, grace, ended)) {
            if (stop_requested_ && !idle_) {
                AFD_LOG_WARN("the step in flight did not finish within {} ms of the stop: cancelling it",
                             grace.count());
                step_cancelled_ = true;
                lock.unlock();
                connector_.cancel();
                lock.lock();
            }
            if (!ended_cv_.wait_for(lock, timeout - grace, ended)) return false;
        }
    }
    if (thread_.joinable()) thread_.join();
    return true;
}

WorkerEnd FfnWorker::end() const {
    std::lock_guard lock(mutex_);
    return end_;
}

core::Status FfnWorker::error() const {
    std::lock_guard lock(mutex_);
    return error_;
}

}  // namespace afd::ffn
