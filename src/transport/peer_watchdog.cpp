#include "transport/peer_watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/logging.h"

namespace afd::transport {

PeerWatchdog::~PeerWatchdog() { stop(); }

core::Status PeerWatchdog::start(std::vector<int> fds, OnHangup on_hangup, std::chrono::milliseconds poll_interval) {
    AFD_CHECK(!thread_.joinable(), "PeerWatchdog started twice");
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        return core::internalError("peer watchdog: pipe: {}", std::strerror(errno));
    }
    stop_read_ = core::UniqueFd(pipe_fds[0]);
    stop_write_ = core::UniqueFd(pipe_fds[1]);
    fds_ = std::move(fds);
    on_hangup_ = std::move(on_hangup);
    poll_interval_ = poll_interval;
    thread_ = std::thread([this] { run(); });
    return core::Status::ok();
}

void PeerWatchdog::stop() {
    if (!thread_.joinable()) return;
    const char byte = 1;
    (void)!::write(stop_write_.get(), &byte, 1);
    thread_.join();
}

void PeerWatchdog::run() {
    std::vector<bool> reported(fds_.size(), false);
    std::vector<pollfd> polled;
    std::vector<size_t> index;
    for (;;) {
        polled.clear();
        index.clear();
        polled.push_back({stop_read_.get(), POLLIN, 0});
        for (size_t i = 0; i < fds_.size(); ++i) {
            if (reported[i]) continue;
            polled.push_back({fds_[i], POLLRDHUP, 0});
            index.push_back(i);
        }
        const int n = ::poll(polled.data(), polled.size(), static_cast<int>(poll_interval_.count()));
        if (n < 0) {
            if (errno == EINTR) continue;
            AFD_LOG_WARN("peer watchdog: poll: {}", std::strerror(errno));
            return;
        }
        if ((polled[0].revents & POLLIN) != 0) return;
        for (size_t k = 1; k < polled.size(); ++k) {
            if ((polled[k].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
            reported[index[k - 1]] = true;
            on_hangup_(index[k - 1]);
        }
    }
}

}  // namespace afd::transport
