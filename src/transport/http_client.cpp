#include "transport/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

#include "core/unique_fd.h"

namespace afd::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxReplyBytes = size_t{64} << 20;
constexpr size_t kReadChunkBytes = 64 * 1024;

// Waits until `fd` reports `events` or the deadline passes; `where` names the exchange in errors.
core::Status waitFor(int fd, short events, Clock::time_point deadline, const std::string& where) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return core::timeoutError("{}: no progress within the timeout", where);
        pollfd entry{fd, events, 0};
        const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
        if (ready > 0) return core::Status::ok();
        if (ready < 0 && errno != EINTR) return core::ioError("{}: poll failed: {}", where, std::strerror(errno));
    }
}

core::Result<core::UniqueFd> connectTo(const std::string& host, int port, Clock::time_point deadline,
                                       const std::string& where) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* raw_list = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &raw_list);
    if (gai != 0) return core::notFound("{}: cannot resolve host: {}", where, ::gai_strerror(gai));
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(raw_list, &::freeaddrinfo);

    int last_errno = ECONNREFUSED;
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        core::UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (!fd.valid()) {
            last_errno = errno;
            continue;
        }
        if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
            if (errno != EINPROGRESS) {
                last_errno = errno;
                continue;
            }
            AFD_RETURN_IF_ERROR(waitFor(fd.get(), POLLOUT, deadline, where));
            int error = 0;
            socklen_t length = sizeof(error);
            if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
            if (error != 0) {
                last_errno = error;
                continue;
            }
        }
        return fd;
    }
    return core::ioError("{}: cannot connect: {}", where, std::strerror(last_errno));
}

// Parses a complete reply head (status line and headers, without the blank line).
core::Status parseReplyHead(std::string_view head, HttpResponse& response, std::optional<size_t>& content_length,
                            const std::string& where) {
    size_t line_end = head.find("\r\n");
    const std::string_view status_line = head.substr(0, line_end);
    head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
    // "HTTP/1.1 200 OK"
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." || status_line[8] != ' ' ||
        (status_line.size() > 12 && status_line[12] != ' ')) {
        return core::corrupt("{}: not an HTTP/1.x status line", where);
    }
    const std::string_view code = status_line.substr(9, 3);
    const auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), response.status);
    if (ec != std::errc() || ptr != code.data() + code.size() || response.status < 100 || response.status > 599) {
        return core::corrupt("{}: malformed status code '{}'", where, code);
    }
    while (!head.empty()) {
        line_end = head.find("\r\n");
        const std::string_view line = head.substr(0, line_end);
        head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) return core::corrupt("{}: malformed reply header line", where);
        std::string name(line.substr(0, colon));
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
        if (name == "content-type") response.content_type = std::string(value);
        if (name == "content-length") {
            size_t length = 0;
            const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
            if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
                return core::corrupt("{}: malformed Content-Length '{}'", where, value);
            }
            if (length > kMaxReplyBytes) return core::corrupt("{}: reply body of {} bytes is too large", where, length);
            content_length = length;
        }
    }
    return core::Status::ok();
}

}  // namespace

core::Result<HttpResponse> httpRequest(const std::string& host, int port, std::string_view method,
                                       std::string_view path, std::string_view body, std::chrono::milliseconds timeout,
                                       std::string_view content_type) {
    const std::string where = fmt::format("HTTP {} {}:{}{}", method, host, port, path);
    const auto forbidden = [](std::string_view text) { return text.find_first_of("\r\n ") != std::string_view::npos; };
    if (method.empty() || forbidden(method) || path.empty() || path.front() != '/' || forbidden(path) ||
        content_type.find_first_of("\r\n") != std::string_view::npos) {
        return core::invalidArgument("{}: method, path or content type is not valid in a request", where);
    }
    const Clock::time_point deadline = Clock::now() + timeout;
    AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, connectTo(host, port, deadline, where));

    const bool ipv6_literal = host.find(':') != std::string::npos;
    std::string request =
        fmt::format("{} {} HTTP/1.1\r\nHost: {}{}{}:{}\r\nConnection: close\r\nContent-Length: {}\r\n", method, path,
                    ipv6_literal ? "[" : "", host, ipv6_literal ? "]" : "", port, body.size());
    if (!body.empty()) request += fmt::format("Content-Type: {}\r\n", content_type);
    request += "\r\n";
    request += body;

    // A server may answer early (e.g. 413) and stop reading; a failed send then still leaves its reply to read.
    size_t sent = 0;
    while (sent < request.size()) {
        const ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            AFD_RETURN_IF_ERROR(waitFor(fd.get(), POLLOUT, deadline, where));
        } else {
            break;
        }
    }

    std::string reply;
    std::optional<size_t> head_end;
    std::optional<size_t> content_length;
    HttpResponse response;
    char buffer[kReadChunkBytes];
    for (;;) {
        if (head_end && content_length && reply.size() >= *head_end + *content_length) break;
        const ssize_t n = ::recv(fd.get(), buffer, sizeof(buffer), 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            AFD_RETURN_IF_ERROR(waitFor(fd.get(), POLLIN, deadline, where));
            continue;
        }
        if (n < 0)
            return core::peerLost("{}: connection failed before a complete reply: {}", where, std::strerror(errno));
        if (n == 0) {
            if (head_end && !content_length) break;  // the body runs to the end of the connection
            return core::peerLost("{}: connection closed before a complete reply ({} bytes received)", where,
                                  reply.size());
        }
        reply.append(buffer, static_cast<size_t>(n));
        if (reply.size() > kMaxReplyBytes) return core::corrupt("{}: reply exceeds {} bytes", where, kMaxReplyBytes);
        if (!head_end) {
            const size_t end = reply.find("\r\n\r\n");
            if (end == std::string::npos) continue;
            head_end = end + 4;
            AFD_RETURN_IF_ERROR(
                parseReplyHead(std::string_view(reply).substr(0, end), response, content_length, where));
        }
    }
    response.body = reply.substr(*head_end, content_length.value_or(reply.size() - *head_end));
    return response;
}

}  // namespace afd::transport
