// PeerWatchdog: a thread that watches connections it does not read, and reports once per connection when the peer
// hangs up (closes, resets, or dies: the kernel closes its sockets). It polls for POLLRDHUP / POLLHUP / POLLERR only,
// so the connection's owner keeps reading and writing it on its own thread. A device connector uses it to end the
// GPU waits on a peer that is gone, which no host read would see while the host sits in a stream synchronisation.
//
// Threads: the callback runs on the watchdog's thread; stop() (also the destructor) joins it within one poll
// interval. The fds must stay open until stop() returns.
#pragma once

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"

namespace afd::transport {

class PeerWatchdog {
public:
    using OnHangup = std::function<void(size_t index)>;  // index into the fds given to start()

    PeerWatchdog() = default;
    ~PeerWatchdog();
    PeerWatchdog(const PeerWatchdog&) = delete;
    PeerWatchdog& operator=(const PeerWatchdog&) = delete;

    // Starts the thread. kInternal when the stop pipe cannot be made.
    core::Status start(std::vector<int> fds, OnHangup on_hangup,
                       std::chrono::milliseconds poll_interval = std::chrono::milliseconds(100));
    // Idempotent.
    void stop();

private:
    void run();

    std::vector<int> fds_;
    OnHangup on_hangup_;
    std::chrono::milliseconds poll_interval_{100};
    core::UniqueFd stop_read_, stop_write_;
    std::thread thread_;
};

}  // namespace afd::transport
