#include "transport/nccl/nccl_monitor.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/logging.h"

namespace afd::transport::nccl {

NcclMonitor::NcclMonitor(const NcclMonitorOptions& options, NcclEndpoint& endpoint, std::vector<PeerInfo> peers)
    : options_(options), endpoint_(endpoint), peers_(std::move(peers)) {
    AFD_CHECK(peers_.size() == endpoint.numPeers(), "nccl monitor: {} peers for an endpoint of {}", peers_.size(),
              endpoint.numPeers());
    active_.assign(peers_.size(), false);
    left_.assign(peers_.size(), false);
    hangup_at_.assign(peers_.size(), std::nullopt);
}

NcclMonitor::~NcclMonitor() { stop(); }

core::Status NcclMonitor::start(std::vector<int> control_fds) {
    AFD_CHECK(control_fds.size() == peers_.size(), "nccl monitor: {} control connections for {} peers",
              control_fds.size(), peers_.size());
    AFD_CHECK(!thread_.joinable(), "nccl monitor started twice");
    AFD_RETURN_IF_ERROR(watchdog_.start(std::move(control_fds), [this](size_t i) { onHangup(i); }));
    thread_ = std::thread([this] { run(); });
    return core::Status::ok();
}

void NcclMonitor::stop() {
    watchdog_.stop();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void NcclMonitor::beginStep(uint64_t step, std::span<const bool> active) {
    AFD_CHECK(active.size() == peers_.size(), "nccl monitor: {} active flags for {} peers", active.size(),
              peers_.size());
    const uint64_t sum = framesTakenSum();
    std::lock_guard<std::mutex> lock(mutex_);
    in_step_ = true;
    step_ = step;
    step_start_ = Clock::now();
    last_progress_ = step_start_;
    progress_sum_ = sum;
    active_.assign(active.begin(), active.end());
}

void NcclMonitor::endStep() {
    std::lock_guard<std::mutex> lock(mutex_);
    in_step_ = false;
}

void NcclMonitor::markLeft(size_t peer) {
    std::lock_guard<std::mutex> lock(mutex_);
    AFD_CHECK(peer < left_.size(), "peer {} of {}", peer, left_.size());
    left_[peer] = true;
}

void NcclMonitor::leaving() {
    std::lock_guard<std::mutex> lock(mutex_);
    leaving_ = true;
}

void NcclMonitor::fail(core::Status why) {
    AFD_CHECK(!why.isOk(), "nccl monitor: fail() with an ok status");
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_.load(std::memory_order_relaxed)) return;
        failure_ = why;
        failed_at_ = Clock::now();
        failed_.store(true, std::memory_order_release);
    }
    endpoint_.markFailed();
    if (why.code() == core::StatusCode::kCancelled) {
        AFD_LOG_INFO("{}", why.message());
    } else {
        AFD_LOG_WARN("{}", why.message());
    }
    wake_.notify_all();
}

core::Status NcclMonitor::failure() const {
    if (!failed()) return core::Status::ok();
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
}

void NcclMonitor::onHangup(size_t peer) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!hangup_at_[peer]) hangup_at_[peer] = Clock::now();
    }
    AFD_LOG_DEBUG("nccl: {} hung up", peers_[peer].describe());
    wake_.notify_all();
}

uint64_t NcclMonitor::framesTakenSum() const {
    uint64_t sum = 0;
    for (size_t i = 0; i < peers_.size(); ++i) sum += endpoint_.framesTaken(i);
    return sum;
}

void NcclMonitor::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        wake_.wait_for(lock, options_.poll_interval);
        if (stopping_) break;
        lock.unlock();
        check(Clock::now());
        lock.lock();
    }
}

void NcclMonitor::check(Clock::time_point now) {
    if (failed()) {
        bool abort_now = false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            abort_now = !aborted_ && now - failed_at_ >= options_.abort_delay;
            if (abort_now) aborted_ = true;
        }
        if (abort_now) endpoint_.comms().abort();
        return;
    }
    if (core::Status s = endpoint_.headerStatus(); !s.isOk()) return fail(std::move(s));
    if (core::Status s = endpoint_.comms().asyncError(); !s.isOk()) return fail(std::move(s));
    std::optional<core::Status> overdue;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        overdue = overdueLocked(now);
    }
    if (overdue) fail(std::move(*overdue));
}

std::optional<core::Status> NcclMonitor::overdueLocked(Clock::time_point now) {
    for (size_t i = 0; i < peers_.size(); ++i) {
        if (!hangup_at_[i] || leaving_) continue;
        bool lost = options_.every_peer_needed;
        if (!lost && !left_[i] && in_step_ && active_[i]) {
            lost = now - std::max(*hangup_at_[i], step_start_) >= options_.hangup_grace;
        }
        if (!lost) continue;
        return core::peerLost("nccl: {}: its control connection closed{} (the process ended or dropped the connection)",
                              peers_[i].describe(), in_step_ ? fmt::format(" during step {}", step_) : "");
    }
    if (!in_step_) return std::nullopt;
    const uint64_t sum = framesTakenSum();
    if (sum != progress_sum_) {
        progress_sum_ = sum;
        last_progress_ = now;
    }
    if (now - last_progress_ < options_.step_timeout) return std::nullopt;
    std::vector<std::string> taken;
    for (size_t i = 0; i < peers_.size(); ++i) {
        if (active_[i]) taken.push_back(fmt::format("{}: {}", peers_[i].describe(), endpoint_.framesTaken(i)));
    }
    return core::timeoutError(
        "nccl: no frame arrived within the step timeout ({} s) in step {}; frames taken from each peer so far: {}",
        std::chrono::duration<double>(options_.step_timeout).count(), step_, fmt::join(taken, ", "));
}

}  // namespace afd::transport::nccl
