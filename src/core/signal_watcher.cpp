#include "core/signal_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace afd::core {

Result<std::unique_ptr<SignalWatcher>> SignalWatcher::create(std::function<void(int)> on_signal) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return internalError("cannot block SIGTERM/SIGINT");
    UniqueFd signal_fd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signal_fd.valid()) return ioError("signalfd failed: {}", std::strerror(errno));
    UniqueFd wake_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd.valid()) return ioError("eventfd failed: {}", std::strerror(errno));
    return std::unique_ptr<SignalWatcher>(
        new SignalWatcher(std::move(signal_fd), std::move(wake_fd), std::move(on_signal)));
}

SignalWatcher::SignalWatcher(UniqueFd signal_fd, UniqueFd wake_fd, std::function<void(int)> on_signal)
    : signal_fd_(std::move(signal_fd)), wake_fd_(std::move(wake_fd)), on_signal_(std::move(on_signal)) {
    thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

SignalWatcher::~SignalWatcher() {
    thread_.request_stop();
    const uint64_t one = 1;
    (void)::write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
}

void SignalWatcher::run(std::stop_token stop) {
    pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    while (!stop.stop_requested()) {
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[1].revents != 0) return;
        signalfd_siginfo info{};
        while (::read(signal_fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
            on_signal_(static_cast<int>(info.ssi_signo));
        }
    }
}

}  // namespace afd::core
