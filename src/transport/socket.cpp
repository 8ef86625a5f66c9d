#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "core/logging.h"
#include "transport/wait_progress.h"

namespace afd::transport {
namespace {

using std::chrono::milliseconds;

core::Status setNoDelay(int fd, std::string_view what) {
    const int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        return core::ioError("{}: setsockopt(TCP_NODELAY): {}", what, errnoText(errno));
    }
    return core::Status::ok();
}

std::string sockaddrToString(const sockaddr_storage& addr) {
    char host[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
        ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        return fmt::format("{}:{}", host, ntohs(in->sin_port));
    }
    if (addr.ss_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
        ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
    }
    return "?";
}

struct AddrInfoDeleter {
    void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

core::Result<AddrInfoPtr> resolve(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo* result = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
    if (rc != 0) {
        return core::ioError("cannot resolve {}: {}", HostPort{host, port}.toString(), ::gai_strerror(rc));
    }
    return AddrInfoPtr(result);
}

// Whether a failed connect attempt may succeed later (the listener is not up yet, the route not ready).
bool retryableConnectError(int error) {
    return error == ECONNREFUSED || error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH ||
           error == ECONNRESET || error == ECONNABORTED || error == EAGAIN || error == EADDRNOTAVAIL;
}

// One connect attempt to one resolved address. Returns the fd, or the errno of the failure.
struct Attempt {
    core::UniqueFd fd;
    int error = 0;
};

// A connect still in progress when a slice of `progress` ends calls report() and goes on waiting until `deadline`.
template <typename Report>
core::Result<Attempt> connectOnce(const addrinfo& ai, Deadline deadline, const Canceller* cancel, std::string_view what,
                                  WaitProgress& progress, Report report) {
    core::UniqueFd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
    if (!fd.valid()) return core::ioError("{}: socket(): {}", what, errnoText(errno));
    if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
        if (errno != EINPROGRESS) return Attempt{core::UniqueFd(), errno};
        while (true) {
            core::Result<short> ready = waitFd(fd.get(), POLLOUT, progress.sliceEnd(), cancel, what);
            if (ready.isOk()) break;
            if (ready.status().code() != core::StatusCode::kTimeout || Clock::now() >= deadline) return ready.status();
            if (progress.reportDue()) report();
        }
        int error = 0;
        socklen_t len = sizeof(error);
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
            return core::ioError("{}: getsockopt(SO_ERROR): {}", what, errnoText(errno));
        }
        if (error != 0) return Attempt{core::UniqueFd(), error};
    }
    // NOTE: a loopback connect to a free port in the ephemeral range can pick that same port as its source and
    // connect to itself (TCP simultaneous open); such a socket talks to nobody, so it counts as refused.
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
        ::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&remote), &remote_len) == 0 &&
        sockaddrToString(local) == sockaddrToString(remote)) {
        return Attempt{core::UniqueFd(), ECONNREFUSED};
    }
    AFD_RETURN_IF_ERROR(setNoDelay(fd.get(), what));
    return Attempt{std::move(fd), 0};
}

}  // namespace

Deadline deadlineAfter(milliseconds duration) {
    const Clock::time_point now = Clock::now();
    if (duration >= std::chrono::duration_cast<milliseconds>(kNoDeadline - now)) return kNoDeadline;
    return now + duration;
}

int pollTimeoutMs(Deadline deadline) {
    if (deadline == kNoDeadline) return -1;
    const Clock::time_point now = Clock::now();
    if (deadline <= now) return 0;
    const auto left = std::chrono::ceil<milliseconds>(deadline - now).count();
    return static_cast<int>(std::min<int64_t>(left, std::numeric_limits<int>::max()));
}

milliseconds timeLeft(Deadline deadline) {
    const Clock::time_point now = Clock::now();
    return deadline <= now ? milliseconds(0) : std::chrono::ceil<milliseconds>(deadline - now);
}

std::string formatDuration(milliseconds duration) {
    const auto ms = duration.count();
    if (ms >= 1000 && ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
    if (ms >= 1000) return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000.0);
    return fmt::format("{} ms", ms);
}

std::string errnoText(int error) {
    char buffer[256];
    // GNU strerror_r returns a pointer that may or may not be `buffer`.
    const char* text = ::strerror_r(error, buffer, sizeof(buffer));
    return text;
}

core::Result<std::unique_ptr<Canceller>> Canceller::create() {
    core::UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!fd.valid()) return core::ioError("eventfd(): {}", errnoText(errno));
    return std::unique_ptr<Canceller>(new Canceller(std::move(fd)));
}

void Canceller::cancel() noexcept {
    cancelled_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    // NOTE: the counter only has to become non-zero; an EAGAIN (counter saturated) already means readable.
    [[maybe_unused]] const ssize_t n = ::write(fd_.get(), &one, sizeof(one));
}

std::string HostPort::toString() const {
    if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
    return fmt::format("{}:{}", host, port);
}

core::Result<HostPort> parseHostPort(std::string_view text) {
    std::string_view host;
    std::string_view port_text;
    if (!text.empty() && text.front() == '[') {
        const size_t close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return core::invalidArgument("address '{}' is not of the form [host]:port", text);
        }
        host = text.substr(1, close - 1);
        port_text = text.substr(close + 2);
    } else {
        const size_t colon = text.rfind(':');
        if (colon == std::string_view::npos) return core::invalidArgument("address '{}' has no :port", text);
        host = text.substr(0, colon);
        port_text = text.substr(colon + 1);
    }
    if (host.empty()) return core::invalidArgument("address '{}' has an empty host", text);
    // The resolver reads the host as a C string, and toString() brackets a host with ':': a NUL, a space or a
    // bracket inside would name another host, or one that does not parse back.
    const auto isHostByte = [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u != 0x7f && c != '[' && c != ']';
    };
    if (!std::all_of(host.begin(), host.end(), isHostByte)) {
        return core::invalidArgument("address '{}': the host may not hold spaces, control characters or brackets",
                                     text);
    }
    int port = 0;
    for (char c : port_text) {
        if (c < '0' || c > '9' || port > 65535) return core::invalidArgument("address '{}' has a bad port", text);
        port = port * 10 + (c - '0');
    }
    if (port_text.empty() || port < 1 || port > 65535) {
        return core::invalidArgument("address '{}': port must be in 1..65535", text);
    }
    return HostPort{std::string(host), port};
}

core::Result<Listener> listenTcp(const std::string& host, int port, int backlog) {
    const std::string where = HostPort{host, port}.toString();
    AFD_ASSIGN_OR_RETURN(AddrInfoPtr info, resolve(host, port, /*passive=*/true));
    int last_error = 0;
    for (const addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
        core::UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (!fd.valid()) {
            last_error = errno;
            continue;
        }
        const int one = 1;
        if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
            return core::ioError("listening on {}: setsockopt(SO_REUSEADDR): {}", where, errnoText(errno));
        }
        if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
            last_error = errno;
            continue;
        }
        sockaddr_storage bound{};
        socklen_t len = sizeof(bound);
        if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
            return core::ioError("listening on {}: getsockname(): {}", where, errnoText(errno));
        }
        const int bound_port = bound.ss_family == AF_INET6
                                   ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                   : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
        return Listener{std::move(fd), bound_port};
    }
    return core::ioError("cannot listen on {}: {}", where, errnoText(last_error));
}

core::Result<int> pickServerPort(const std::string& host) {
    int ephemeral_low = 32768;  // Linux's default, where the file cannot be read
    {
        std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
        int low = 0;
        int high = 0;
        if (range >> low >> high && low > 1024 && low <= 65535) {
            ephemeral_low = low;
        }
    }
    const int first = std::max(1024, ephemeral_low - 16384);
    const int span = ephemeral_low - first;
    if (span >= 64) {
        std::mt19937 rng(std::random_device{}());
        std::uniform_int_distribution<int> offset(0, span - 1);
        for (int attempt = 0; attempt < 64; ++attempt) {
            const int port = first + offset(rng);
            if (listenTcp(host, port).isOk()) {
                return port;  // the listener closes here; nothing outside this range takes the port meanwhile
            }
        }
    }
    AFD_ASSIGN_OR_RETURN(Listener listener, listenTcp(host, 0));
    return listener.port;
}

core::Result<core::UniqueFd> acceptTcp(int listen_fd, Deadline deadline, const Canceller* cancel,
                                       std::string_view what) {
    while (true) {
        core::UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (fd.valid()) {
            AFD_RETURN_IF_ERROR(setNoDelay(fd.get(), what));
            return fd;
        }
        const int error = errno;
        if (error == EINTR || error == ECONNABORTED) continue;
        if (error != EAGAIN && error != EWOULDBLOCK) {
            return core::ioError("{}: accept(): {}", what, errnoText(error));
        }
        AFD_ASSIGN_OR_RETURN(short revents, waitFd(listen_fd, POLLIN, deadline, cancel, what));
        (void)revents;
    }
}

core::Result<core::UniqueFd> connectTcp(const HostPort& address, Deadline deadline, const Canceller* cancel,
                                        std::string_view what, milliseconds report_every) {
    const std::string where = address.toString();
    const Clock::time_point start = Clock::now();
    WaitProgress progress(start, deadline, report_every);
    milliseconds backoff(10);
    std::string last_error = "no attempt";
    const auto report = [&] {
        AFD_LOG_INFO("waiting for {} at {} to accept a connection ({}; last error: {})", what, where,
                     progress.progress(), last_error);
    };
    while (true) {
        core::Result<AddrInfoPtr> info = resolve(address.host, address.port, /*passive=*/false);
        if (info.isOk()) {
            for (const addrinfo* ai = info->get(); ai != nullptr; ai = ai->ai_next) {
                core::Result<Attempt> attempt = connectOnce(*ai, deadline, cancel, what, progress, [&] {
                    last_error = "the connection attempt has not completed";
                    report();
                });
                if (!attempt.isOk()) {
                    if (attempt.status().code() == core::StatusCode::kTimeout) break;
                    return attempt.status().withContext(fmt::format("connecting to {} at {}", what, where));
                }
                if (attempt->fd.valid()) return std::move(attempt->fd);
                last_error = errnoText(attempt->error);
                if (!retryableConnectError(attempt->error)) {
                    return core::ioError("connecting to {} at {}: {}", what, where, last_error);
                }
            }
        } else {
            last_error = info.status().message();
        }
        const Clock::time_point now = Clock::now();
        if (now >= deadline) {
            return core::timeoutError("connecting to {} at {}: no connection after {} (last error: {})", what, where,
                                      formatDuration(std::chrono::duration_cast<milliseconds>(now - start)),
                                      last_error);
        }
        if (progress.reportDue()) report();
        // Back off, cancellably, before the next attempt (one comes at each report time, so that reports are
        // on time).
        const Deadline retry_at = std::min({deadline, deadlineAfter(backoff), progress.sliceEnd()});
        backoff = std::min(backoff * 2, milliseconds(250));
        pollfd pfd{cancel != nullptr ? cancel->fd() : -1, POLLIN, 0};
        const int rc = ::poll(&pfd, 1, pollTimeoutMs(retry_at));
        if (rc < 0 && errno != EINTR)
            return core::ioError("connecting to {} at {}: poll(): {}", what, where, errnoText(errno));
        if (cancel != nullptr && cancel->cancelled()) {
            return core::Status(core::StatusCode::kCancelled,
                                fmt::format("connecting to {} at {}: cancelled", what, where));
        }
    }
}

core::Result<short> waitFd(int fd, short events, Deadline deadline, const Canceller* cancel, std::string_view what) {
    const Clock::time_point start = Clock::now();
    while (true) {
        pollfd fds[2] = {{fd, events, 0}, {cancel != nullptr ? cancel->fd() : -1, POLLIN, 0}};
        const int rc = ::poll(fds, 2, pollTimeoutMs(deadline));
        if (rc < 0) {
            if (errno == EINTR) continue;
            return core::ioError("{}: poll(): {}", what, errnoText(errno));
        }
        if (fds[1].revents != 0) return core::Status(core::StatusCode::kCancelled, fmt::format("{}: cancelled", what));
        if (rc == 0) {
            return core::timeoutError("{}: nothing after {}", what,
                                      formatDuration(std::chrono::duration_cast<milliseconds>(Clock::now() - start)));
        }
        if (fds[0].revents != 0) return fds[0].revents;
    }
}

core::Status sendAll(int fd, const void* data, size_t size, Deadline deadline, const Canceller* cancel,
                     std::string_view peer) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::send(fd, p + done, size - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        const int error = errno;
        if (error == EINTR) continue;
        if (error == EAGAIN || error == EWOULDBLOCK) {
            AFD_ASSIGN_OR_RETURN(short revents,
                                 waitFd(fd, POLLOUT, deadline, cancel, fmt::format("sending to {}", peer)));
            (void)revents;
            continue;
        }
        if (error == EPIPE || error == ECONNRESET) {
            return core::peerLost("{} closed the connection ({} of {} bytes sent)", peer, done, size);
        }
        return core::ioError("sending to {}: {}", peer, errnoText(error));
    }
    return core::Status::ok();
}

core::Status recvAll(int fd, void* data, size_t size, Deadline deadline, const Canceller* cancel,
                     std::string_view peer) {
    auto* p = static_cast<uint8_t*>(data);
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::recv(fd, p + done, size - done, 0);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n == 0) return core::peerLost("{} closed the connection ({} of {} bytes received)", peer, done, size);
        const int error = errno;
        if (error == EINTR) continue;
        if (error == EAGAIN || error == EWOULDBLOCK) {
            AFD_ASSIGN_OR_RETURN(short revents,
                                 waitFd(fd, POLLIN, deadline, cancel, fmt::format("receiving from {}", peer)));
            (void)revents;
            continue;
        }
        if (error == ECONNRESET) return core::peerLost("{} reset the connection", peer);
        return core::ioError("receiving from {}: {}", peer, errnoText(error));
    }
    return core::Status::ok();
}

std::string peerAddress(int fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
    return sockaddrToString(addr);
}

std::string localAddress(int fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
    return sockaddrToString(addr);
}

}  // namespace afd::transport
