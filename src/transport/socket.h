// RAII TCP helpers: listen, connect with retry, accept, and deadline-bounded, cancellable send/recv of whole
// buffers. Every socket made here is non-blocking, close-on-exec and (for connections) TCP_NODELAY; waits poll
// the socket together with an optional Canceller. Errors name the address or peer and the call that failed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/unique_fd.h"

namespace afd::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

Deadline deadlineAfter(std::chrono::milliseconds duration);
// The poll() timeout until `deadline`: -1 for kNoDeadline, else the milliseconds left rounded up (≥ 0).
int pollTimeoutMs(Deadline deadline);
// The time left until a finite `deadline`, rounded up (0 once it has passed).
std::chrono::milliseconds timeLeft(Deadline deadline);
// "30 s", "250 ms": durations in messages.
std::string formatDuration(std::chrono::milliseconds duration);

// A cancellation handle: an eventfd that becomes readable, and stays readable, once cancel() has been called.
// Waits poll it beside their sockets and return kCancelled. cancel() and cancelled() are thread-safe.
class Canceller {
public:
    static core::Result<std::unique_ptr<Canceller>> create();
    Canceller(const Canceller&) = delete;
    Canceller& operator=(const Canceller&) = delete;

    void cancel() noexcept;
    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
    int fd() const { return fd_.get(); }

private:
    explicit Canceller(core::UniqueFd fd) : fd_(std::move(fd)) {}
    core::UniqueFd fd_;
    std::atomic<bool> cancelled_{false};
};

struct HostPort {
    std::string host;
    int port = 0;
    // "127.0.0.1:29500", "[::1]:29500".
    std::string toString() const;
};
// Parses "host:port" or "[v6]:port"; port in 1..65535; the host non-empty, without spaces, control characters or
// brackets.
core::Result<HostPort> parseHostPort(std::string_view text);

struct Listener {
    core::UniqueFd fd;
    int port = 0;  // the bound port (the kernel's choice when asked for 0)
};
// Binds `host:port` (port 0: an ephemeral port) with SO_REUSEADDR and listens.
core::Result<Listener> listenTcp(const std::string& host, int port, int backlog = 128);

// A port on `host` for a server that another process binds later (the rendezvous store that `afd launch` hands to
// FFN rank 0, test servers): a random one below the kernel's ephemeral range (net.ipv4.ip_local_port_range), free
// when checked. A port from binding port 0 and closing lies inside that range, where any outgoing connection may take
// it as its source port before the server binds it (a test of `afd launch` failed so once among parallel tests). Falls
// back to the kernel's ephemeral choice where the range leaves no room below it.
core::Result<int> pickServerPort(const std::string& host);

// Accepts one connection from a non-blocking listener, waiting until `deadline`.
core::Result<core::UniqueFd> acceptTcp(int listen_fd, Deadline deadline, const Canceller* cancel,
                                       std::string_view what);

// Connects to `address`, retrying refused or unreachable attempts until `deadline`, so that either side may
// start first. `what` names the purpose in errors ("rendezvous store", "ffn rank 1"). While no connection is made,
// every `report_every` (> 0; 0: never) logs at INFO "waiting for <what> at <address> to accept a connection (5 s
// of 120 s; last error: …)".
core::Result<core::UniqueFd> connectTcp(const HostPort& address, Deadline deadline, const Canceller* cancel,
                                        std::string_view what,
                                        std::chrono::milliseconds report_every = std::chrono::milliseconds(0));

// Writes/reads exactly `size` bytes. EOF or reset → kPeerLost; the deadline → kTimeout; the canceller →
// kCancelled; other failures → kIoError. `peer` names the other side in messages.
core::Status sendAll(int fd, const void* data, size_t size, Deadline deadline, const Canceller* cancel,
                     std::string_view peer);
core::Status recvAll(int fd, void* data, size_t size, Deadline deadline, const Canceller* cancel,
                     std::string_view peer);

// Waits until `fd` reports one of `events` (or an error/hangup); returns the revents.
core::Result<short> waitFd(int fd, short events, Deadline deadline, const Canceller* cancel, std::string_view what);

// "127.0.0.1:40122" of the other / this end of a connected socket; "?" when unknown.
std::string peerAddress(int fd);
std::string localAddress(int fd);

// The error text of errno `error`.
std::string errnoText(int error);

}  // namespace afd::transport
