#include "transport/wait_progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

// Whole seconds where the duration is within 50 ms of them or at least 10 s (a report every 5 s reads "5 s", not
// "5.0 s" or "5004 ms"); formatDuration of the rounded milliseconds otherwise ("1.2 s", "300 ms").
std::string roundedDuration(Clock::duration duration) {
    const milliseconds ms = std::max(std::chrono::round<milliseconds>(duration), milliseconds(0));
    const int64_t fraction = ms.count() % 1000;
    if (ms >= milliseconds(1000) && (ms >= milliseconds(10000) || fraction < 50 || fraction > 950)) {
        return formatDuration(std::chrono::round<std::chrono::seconds>(ms));
    }
    return formatDuration(ms);
}

}  // namespace

WaitProgress::WaitProgress(Clock::time_point start, Deadline deadline, milliseconds interval)
    : start_(start), deadline_(deadline), interval_(interval), next_report_(kNoDeadline) {
    if (interval_.count() > 0) {
        const Clock::time_point now = Clock::now();
        next_report_ =
            interval_ >= std::chrono::duration_cast<milliseconds>(kNoDeadline - now) ? kNoDeadline : now + interval_;
    }
}

Deadline WaitProgress::sliceEnd() const { return std::min(next_report_, deadline_); }

bool WaitProgress::reportDue() {
    if (next_report_ == kNoDeadline) return false;
    const Clock::time_point now = Clock::now();
    if (now < next_report_ || now >= deadline_) return false;
    while (next_report_ <= now) next_report_ += interval_;
    return true;
}

std::string WaitProgress::progress() const {
    const std::string waited = roundedDuration(Clock::now() - start_);
    if (deadline_ == kNoDeadline) return fmt::format("{} so far", waited);
    return fmt::format("{} of {}", waited, roundedDuration(deadline_ - start_));
}

}  // namespace afd::transport
