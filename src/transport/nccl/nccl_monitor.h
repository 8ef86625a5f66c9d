// NcclMonitor: what ends the nccl connector's device waits, which NCCL cannot bound by itself (it has no timeout per
// operation): a thread that, every poll interval, looks for a reason to fail and, once one is recorded, aborts the
// communicators (ncclCommAbort ends every kernel of theirs, so the caller's stream synchronisation returns and
// deviceStatus() reports the reason). Reasons, the first one wins:
//   - a header check recorded a mismatch (kCorrupt), or a communicator reports an asynchronous error (a remote or
//     network failure: kPeerLost; else kInternal);
//   - a peer's control connection hung up (PeerWatchdog; kPeerLost naming it). On an attention rank every FFN peer
//     takes part in every step, so any hang-up counts. FFN ranks see attention ranks leave one by one (a header with
//     kStepShutdown, then they close): a hang-up counts for a peer that has not left and takes part in the step in
//     flight, once `hangup_grace` has passed since both the hang-up and the step's start without the step ending
//     (a peer that left cleanly had every frame of its last step, and the rest of that step is the other peers');
//   - a step in flight (between beginStep and endStep) took no frame from any peer for `step_timeout` (kTimeout,
//     with the frames taken from each peer so far);
//   - fail(): an error the connector met, or cancel().
// The abort comes `abort_delay` after the reason is recorded: the connector refuses every call from the moment the
// reason is recorded, so a graph launched just before (by a caller that had not seen it yet) is on the device, and
// ended by the abort, rather than launched after it on freed communicators.
//
// Threads: the monitor's own, the watchdog's (hang-ups), and the connector's user (beginStep, endStep, markLeft,
// leaving); fail() and failure() from any thread. NCCL calls happen on the monitor thread only through NcclComms,
// which serialises them with the user's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "core/status.h"
#include "transport/connector.h"
#include "transport/nccl/nccl_endpoint.h"
#include "transport/peer_watchdog.h"
#include "transport/socket.h"

namespace afd::transport::nccl {

struct NcclMonitorOptions {
    bool every_peer_needed = true;  // an attention rank; false on an FFN rank (see above)
    std::chrono::milliseconds step_timeout{60000};
    std::chrono::milliseconds hangup_grace{2000};
    std::chrono::milliseconds abort_delay{100};
    std::chrono::milliseconds poll_interval{20};
};

class NcclMonitor {
public:
    // `endpoint` (with its communicators attached) outlives the monitor; peers in peers() order.
    NcclMonitor(const NcclMonitorOptions& options, NcclEndpoint& endpoint, std::vector<PeerInfo> peers);
    ~NcclMonitor();  // stop()
    NcclMonitor(const NcclMonitor&) = delete;
    NcclMonitor& operator=(const NcclMonitor&) = delete;

    // Starts watching the control connections (fds in peers order, open until stop() returns) and the monitor thread.
    core::Status start(std::vector<int> control_fds);
    // Joins both threads. Idempotent. The communicators are left to their owner.
    void stop();

    // A step begins: `active[i]` for the peers that take part (all on an attention rank).
    void beginStep(uint64_t step, std::span<const bool> active);
    // The caller has synchronised the step and found no error.
    void endStep();
    // Peer `peer` has left (its kStepShutdown header was read): its hang-up is its goodbye.
    void markLeft(size_t peer);
    // This rank has sent its last header: hang-ups no longer count.
    void leaving();

    // Any thread: records `why` unless a reason is recorded already; the checks record nothing from now on.
    void fail(core::Status why);
    // Any thread: the recorded reason, ok while none.
    core::Status failure() const;
    bool failed() const { return failed_.load(std::memory_order_acquire); }

private:
    void run();
    void check(Clock::time_point now);
    void onHangup(size_t peer);
    std::optional<core::Status> overdueLocked(Clock::time_point now);
    uint64_t framesTakenSum() const;

    const NcclMonitorOptions options_;
    NcclEndpoint& endpoint_;
    const std::vector<PeerInfo> peers_;
    PeerWatchdog watchdog_;
    std::thread thread_;

    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable wake_;
    bool stopping_ = false;
    std::atomic<bool> failed_{false};
    core::Status failure_;
    Clock::time_point failed_at_{};
    bool aborted_ = false;
    bool in_step_ = false;
    uint64_t step_ = 0;
    Clock::time_point step_start_{};
    Clock::time_point last_progress_{};
    uint64_t progress_sum_ = 0;
    bool leaving_ = false;
    std::vector<bool> active_;
    std::vector<bool> left_;
    std::vector<std::optional<Clock::time_point>> hangup_at_;
};

}  // namespace afd::transport::nccl
