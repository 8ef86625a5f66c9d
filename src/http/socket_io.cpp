#include "http/socket_io.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "http/http_message.h"

namespace afd::http::detail {
namespace {

std::string_view reasonPhrase(int status) {
    switch (status) {
        case 400:
            return "Bad Request";
        case 408:
            return "Request Timeout";
        case 413:
            return "Payload Too Large";
        case 431:
            return "Request Header Fields Too Large";
        case 500:
            return "Internal Server Error";
        case 501:
            return "Not Implemented";
        case 503:
            return "Service Unavailable";
        default:
            return "Error";  // clients read the code; the phrase is informative only
    }
}

}  // namespace

WaitResult waitFor(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            // One look without waiting: a deadline that has passed still sees what is already there.
            pollfd entry{fd, events, 0};
            const int ready = ::poll(&entry, 1, 0);
            if (ready > 0) return WaitResult::kReady;
            if (ready < 0 && errno == EINTR) continue;
            return ready == 0 ? WaitResult::kTimeout : WaitResult::kFailed;
        }
        pollfd entry{fd, events, 0};
        const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
        if (ready > 0) return WaitResult::kReady;
        if (ready < 0 && errno != EINTR) return WaitResult::kFailed;
    }
}

bool peerClosed(int fd) {
    pollfd entry{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    int ready = 0;
    do {
        ready = ::poll(&entry, 1, 0);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) return true;
    if (ready == 0) return false;
    if ((entry.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) != 0) return true;
    char byte = 0;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // unread bytes: the peer is still there
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

bool sendAll(int fd, std::string_view bytes, Clock::time_point deadline) {
    size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (waitFor(fd, POLLOUT, deadline) != WaitResult::kReady) return false;
        } else {
            return false;
        }
    }
    return true;
}

void drainBeforeClose(int fd, std::chrono::milliseconds max_linger, size_t max_bytes) {
    ::shutdown(fd, SHUT_WR);
    const Clock::time_point deadline = Clock::now() + max_linger;
    size_t drained = 0;
    char buffer[16 * 1024];
    while (drained < max_bytes && waitFor(fd, POLLIN, deadline) == WaitResult::kReady) {
        const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n <= 0) break;
        drained += static_cast<size_t>(n);
    }
}

std::string serverErrorReply(int status, std::string_view message) {
    const std::string body = errorBody(status, message);
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
        reasonPhrase(status), body.size(), body);
}

void socketAddress(int fd, bool remote, std::string& ip, int& port) {
    ip.clear();
    port = 0;
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    auto* raw = reinterpret_cast<sockaddr*>(&address);
    if ((remote ? ::getpeername(fd, raw, &length) : ::getsockname(fd, raw, &length)) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (address.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
        if (::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) != nullptr) ip = text;
        port = ntohs(v4->sin_port);
    } else if (address.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
        if (::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text)) != nullptr) ip = text;
        port = ntohs(v6->sin6_port);
    }
}

}  // namespace afd::http::detail
