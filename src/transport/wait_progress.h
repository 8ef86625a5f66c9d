// WaitProgress: how a long, bounded wait says whom it waits for. The waiter waits in slices that end at the next
// report time (sliceEnd()); when a slice runs out before the deadline, reportDue() turns true once and the waiter logs
// one INFO line naming who is still awaited, with progress() ("5 s of 120 s"). The deadline itself never moves.
//
// Not thread-safe: one waiter uses it.
#pragma once

#include <chrono>
#include <string>

#include "transport/socket.h"

namespace afd::transport {

// How often the rendezvous and connection-setup waits report themselves unless told otherwise.
inline constexpr std::chrono::milliseconds kWaitReportInterval{5000};

class WaitProgress {
public:
    // A wait that began at `start` (elapsed time counts from there) and ends at `deadline`; the first report is due
    // one `interval` from now. `interval` ≤ 0: never due.
    WaitProgress(Clock::time_point start, Deadline deadline, std::chrono::milliseconds interval);
    // A wait that begins now.
    WaitProgress(Deadline deadline, std::chrono::milliseconds interval)
        : WaitProgress(Clock::now(), deadline, interval) {}

    // Where the current slice ends: the next report time, or the deadline when that comes first.
    Deadline sliceEnd() const;
    // True when the report time has passed and the deadline has not; the next report is then one interval on.
    bool reportDue();
    // "5 s of 120 s": the time waited and the whole wait, in whole seconds when that is near enough ("5 s so far"
    // without a deadline).
    std::string progress() const;

private:
    Clock::time_point start_;
    Deadline deadline_;
    std::chrono::milliseconds interval_;
    Clock::time_point next_report_;
};

}  // namespace afd::transport
