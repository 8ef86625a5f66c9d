// SignalWatcher: turns SIGTERM and SIGINT into a callback on a thread of its own.
//
// Construct it first thing in main (before any other thread exists): it blocks both signals for the process, so
// every thread created later inherits the mask and the signals are only seen here (through a signalfd). The
// callback runs on the watcher thread, once per signal received, and must not block. The destructor stops and
// joins the thread; the signals stay blocked.
#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <thread>

#include "core/status.h"
#include "core/unique_fd.h"

namespace afd::core {

class SignalWatcher {
public:
    static Result<std::unique_ptr<SignalWatcher>> create(std::function<void(int signal)> on_signal);
    ~SignalWatcher();
    SignalWatcher(const SignalWatcher&) = delete;
    SignalWatcher& operator=(const SignalWatcher&) = delete;

private:
    SignalWatcher(UniqueFd signal_fd, UniqueFd wake_fd, std::function<void(int)> on_signal);
    void run(std::stop_token stop);

    UniqueFd signal_fd_;
    UniqueFd wake_fd_;  // eventfd written by the destructor
    std::function<void(int)> on_signal_;
    std::jthread thread_;
};

}  // namespace afd::core
