#include "cli/load_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "core/logging.h"

namespace afd::cli {

LoadProgressReporter::LoadProgressReporter(std::string what, std::function<bool()> stop_requested,
                                           int64_t test_delay_ms)
    : what_(std::move(what)),
      stop_requested_(std::move(stop_requested)),
      test_delay_ms_(test_delay_ms),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

LoadProgressReporter::~LoadProgressReporter() {
    if (drawn_) std::fputc('\n', stderr);
}

model::LoadProgress LoadProgressReporter::callback() {
    return [this](int64_t done, int64_t total) {
        if (test_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_delay_ms_));
        update(done, total);
        return !(stop_requested_ && stop_requested_());
    };
}

void LoadProgressReporter::update(int64_t done, int64_t total) {
    if (total <= 0) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (tty_) {
        constexpr int kWidth = 30;
        const int filled = static_cast<int>(kWidth * done / total);
        const std::string bar =
            std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.');
        std::fputs(fmt::format("\rLoading {} [{}] {}/{} layers, {:.1f} s", what_, bar, done, total, seconds).c_str(),
                   stderr);
        std::fflush(stderr);
        drawn_ = true;
        return;
    }
    const int64_t tenth = 10 * done / total;
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    AFD_LOG_INFO("loading {}: {}/{} layers ({}%) in {:.1f} s", what_, done, total, 100 * done / total, seconds);
}

}  // namespace afd::cli
