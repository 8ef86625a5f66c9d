#include "transport/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

#include "core/check.h"
#include "core/logging.h"

namespace afd::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunkBytes = 16 * 1024;
constexpr int kListenBacklog = 64;
// After the reply, unread request bytes are drained (so that closing does not reset the connection before the
// client has read the reply), for at most this long and this many bytes.
constexpr auto kMaxLinger = std::chrono::milliseconds(1000);
constexpr size_t kMaxDrainBytes = 8 * 1024 * 1024;
// When accept() fails for lack of descriptors, the listening socket rests this long instead of spinning.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

constexpr std::pair<int, std::string_view> kReasonPhrases[] = {
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {413, "Content Too Large"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {503, "Service Unavailable"},
    {505, "HTTP Version Not Supported"},
};

std::string_view reasonPhrase(int status) {
    for (const auto& [code, phrase] : kReasonPhrases) {
        if (code == status) return phrase;
    }
    return "Status";  // clients read the code; the phrase is informative only
}

std::string serializeReply(const HttpReply& reply, const std::string& allow) {
    std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                                  reply.status, reasonPhrase(reply.status), reply.content_type, reply.body.size());
    if (!allow.empty()) out += fmt::format("Allow: {}\r\n", allow);
    out += "\r\n";
    out += reply.body;
    return out;
}

bool wouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

struct HttpServer::Connection {
    enum class State { kReading, kWriting, kDraining, kClosed };

    core::UniqueFd fd;
    State state = State::kReading;
    Clock::time_point deadline;
    std::string in;  // bytes received so far (head, then body)
    bool head_parsed = false;
    size_t body_offset = 0;  // where the body starts in `in`, once the head is parsed
    uint64_t content_length = 0;
    HttpRequest request;
    std::string out;  // the serialized reply
    size_t out_offset = 0;
    size_t drained = 0;
};

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() {
    try {
        stop();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("admin HTTP server: stop during destruction failed: {}", e.what());
    }
}

void HttpServer::addRoute(std::string method, std::string path, HttpHandler handler) {
    std::lock_guard lock(lifecycle_mutex_);
    AFD_CHECK(!started_, "HttpServer::addRoute({} {}) after start()", method, path);
    AFD_CHECK(handler != nullptr, "HttpServer::addRoute({} {}) without a handler", method, path);
    auto& methods = routes_[path];
    AFD_CHECK(methods.find(method) == methods.end(), "route {} {} registered twice", method, path);
    methods.emplace(std::move(method), std::move(handler));
}

core::Status HttpServer::start() {
    std::lock_guard lock(lifecycle_mutex_);
    AFD_CHECK(!started_, "HttpServer::start() called twice");
    const std::string address = fmt::format("{}:{}", options_.host, options_.port);

    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* raw_list = nullptr;
    const int gai = ::getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &raw_list);
    if (gai != 0) return core::notFound("admin HTTP server: cannot resolve {}: {}", address, ::gai_strerror(gai));
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(raw_list, &::freeaddrinfo);

    core::UniqueFd listen_fd;
    int last_errno = 0;
    for (const addrinfo* ai = list.get(); ai != nullptr && !listen_fd.valid(); ai = ai->ai_next) {
        core::UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (!fd.valid()) {
            last_errno = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), kListenBacklog) != 0) {
            last_errno = errno;
            continue;
        }
        listen_fd = std::move(fd);
    }
    if (!listen_fd.valid()) {
        return core::ioError("admin HTTP server: cannot listen on {}: {}", address, std::strerror(last_errno));
    }
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof(bound);
    if (::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
        return core::ioError("admin HTTP server: getsockname on {} failed: {}", address, std::strerror(errno));
    }
    const uint16_t net_port = bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port;

    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        return core::ioError("admin HTTP server: cannot create its wake-up pipe: {}", std::strerror(errno));
    }
    // Nothing can fail from here on.
    listen_fd_ = std::move(listen_fd);
    port_.store(ntohs(net_port), std::memory_order_release);
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);

    started_ = true;
    thread_ = std::jthread([this](std::stop_token stop_token) { serve(stop_token); });
    AFD_LOG_INFO("admin HTTP server listening on {}:{}", options_.host, port());
    return core::Status::ok();
}

void HttpServer::stop() {
    std::lock_guard lock(lifecycle_mutex_);
    if (!thread_.joinable()) return;
    AFD_CHECK(std::this_thread::get_id() != thread_.get_id(), "HttpServer::stop() called from a handler");
    thread_.request_stop();
    const char byte = 1;
    // NOTE: a full pipe (EAGAIN) already guarantees a wake-up, so the result is not needed.
    [[maybe_unused]] const ssize_t written = ::write(wake_write_.get(), &byte, 1);
    thread_.join();
    listen_fd_.reset();
    wake_read_.reset();
    wake_write_.reset();
    AFD_LOG_DEBUG("admin HTTP server on port {} stopped", port());
}

void HttpServer::serve(std::stop_token stop_token) {
    std::vector<Connection> connections;
    Clock::time_point accept_resumes_at{};
    std::vector<pollfd> fds;
    try {
        while (!stop_token.stop_requested()) {
            const Clock::time_point now = Clock::now();
            const bool accepting =
                static_cast<int>(connections.size()) < options_.max_connections && now >= accept_resumes_at;
            fds.clear();
            fds.push_back({wake_read_.get(), POLLIN, 0});
            fds.push_back({accepting ? listen_fd_.get() : -1, POLLIN, 0});
            std::optional<Clock::time_point> wake_at;
            if (!accepting && static_cast<int>(connections.size()) < options_.max_connections) {
                wake_at = accept_resumes_at;  // the accept back-off ends
            }
            for (const Connection& c : connections) {
                fds.push_back(
                    {c.fd.get(), static_cast<short>(c.state == Connection::State::kWriting ? POLLOUT : POLLIN), 0});
                wake_at = wake_at ? std::min(*wake_at, c.deadline) : c.deadline;
            }
            int timeout_ms = -1;
            if (wake_at) {
                const auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake_at - now).count();
                timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
            }
            const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
            if (ready < 0) {
                if (errno == EINTR) continue;
                AFD_LOG_ERROR("admin HTTP server: poll failed: {}; serving stops", std::strerror(errno));
                return;
            }
            if (stop_token.stop_requested()) break;
            if (fds[1].revents != 0 && !acceptPending(connections)) {
                accept_resumes_at = Clock::now() + kAcceptBackoff;
            }
            // NOTE: connections accepted just now are beyond fds; they are polled from the next round.
            for (size_t i = 0; i + 2 < fds.size(); ++i) {
                if (fds[i + 2].revents == 0) continue;
                Connection& c = connections[i];
                if (c.state == Connection::State::kWriting) {
                    writeReply(c);  // continues the pending write
                } else {
                    readFrom(c);
                }
            }
            const Clock::time_point after = Clock::now();
            for (Connection& c : connections) {
                if (c.state == Connection::State::kClosed || after < c.deadline) continue;
                if (c.state == Connection::State::kReading) {
                    HttpReply reply{408, "text/plain; charset=utf-8",
                                    "request not received within the read deadline\n"};
                    c.out = serializeReply(reply, "");
                    c.state = Connection::State::kWriting;
                    c.deadline = after + options_.read_timeout;
                    writeReply(c);
                } else {
                    c.state = Connection::State::kClosed;
                }
            }
            std::erase_if(connections, [](const Connection& c) { return c.state == Connection::State::kClosed; });
        }
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("admin HTTP server: serving stops after an unexpected error: {}", e.what());
    } catch (...) {
        AFD_LOG_ERROR("admin HTTP server: serving stops after an unexpected non-standard exception");
    }
}

bool HttpServer::acceptPending(std::vector<Connection>& connections) {
    while (static_cast<int>(connections.size()) < options_.max_connections) {
        core::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd.valid()) {
            if (errno != EMFILE && errno != ENFILE) return true;  // drained (EAGAIN) or a client that gave up
            AFD_LOG_WARN("admin HTTP server: cannot accept: {}", std::strerror(errno));
            return false;
        }
        Connection& c = connections.emplace_back();
        c.fd = std::move(fd);
        c.deadline = Clock::now() + options_.read_timeout;
    }
    return true;
}

void HttpServer::readFrom(Connection& c) {
    char buffer[kReadChunkBytes];
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && wouldBlock(errno)) return;
    if (n <= 0) {  // EOF or an error: nobody left to answer
        c.state = Connection::State::kClosed;
        return;
    }
    if (c.state == Connection::State::kDraining) {
        c.drained += static_cast<size_t>(n);
        if (c.drained > kMaxDrainBytes) c.state = Connection::State::kClosed;
        return;
    }
    c.in.append(buffer, static_cast<size_t>(n));

    std::optional<HttpRejection> rejection;
    if (!c.head_parsed) {
        const size_t end = c.in.find("\r\n\r\n");
        if (end == std::string::npos) {
            if (c.in.size() >= options_.max_header_bytes) {
                rejection = HttpRejection{431, fmt::format("request head exceeds {} bytes", options_.max_header_bytes)};
            } else {
                return;  // wait for more
            }
        } else if (end + 4 > options_.max_header_bytes) {
            rejection = HttpRejection{431, fmt::format("request head exceeds {} bytes", options_.max_header_bytes)};
        } else {
            rejection = parseRequestHead(std::string_view(c.in).substr(0, end), c.request, c.content_length);
            c.head_parsed = !rejection;
            c.body_offset = end + 4;
            if (!rejection && c.content_length > options_.max_body_bytes) {
                rejection = HttpRejection{413, fmt::format("request body of {} bytes exceeds {} bytes",
                                                           c.content_length, options_.max_body_bytes)};
            }
        }
    }
    if (rejection) {
        AFD_LOG_DEBUG("admin HTTP server: rejecting a request with {}: {}", rejection->status, rejection->message);
        c.out =
            serializeReply(HttpReply{rejection->status, "text/plain; charset=utf-8", rejection->message + "\n"}, "");
        c.state = Connection::State::kWriting;
        c.deadline = Clock::now() + options_.read_timeout;
        writeReply(c);
        return;
    }
    if (c.in.size() - c.body_offset < c.content_length) return;  // body incomplete

    c.request.body = c.in.substr(c.body_offset, static_cast<size_t>(c.content_length));
    std::string allow;
    const HttpReply reply = route(c.request, &allow);
    c.out = serializeReply(reply, allow);
    c.in.clear();
    c.state = Connection::State::kWriting;
    c.deadline = Clock::now() + options_.read_timeout;
    writeReply(c);
}

// Writes as much of the reply as the socket takes; once all is out, half-closes and starts draining.
void HttpServer::writeReply(Connection& c) {
    while (c.out_offset < c.out.size()) {
        const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset, MSG_NOSIGNAL);
        if (n < 0 && wouldBlock(errno)) return;
        if (n <= 0) {
            c.state = Connection::State::kClosed;
            return;
        }
        c.out_offset += static_cast<size_t>(n);
    }
    ::shutdown(c.fd.get(), SHUT_WR);
    c.state = Connection::State::kDraining;
    c.deadline = Clock::now() + std::min<Clock::duration>(options_.read_timeout, kMaxLinger);
}

HttpReply HttpServer::route(const HttpRequest& request, std::string* allow) const {
    const auto path = routes_.find(request.path);
    if (path == routes_.end()) return HttpReply{404, "text/plain; charset=utf-8", "no such path\n"};
    const auto handler = path->second.find(request.method);
    if (handler == path->second.end()) {
        for (const auto& [method, unused] : path->second) *allow += (allow->empty() ? "" : ", ") + method;
        return HttpReply{405, "text/plain; charset=utf-8", fmt::format("allowed methods: {}\n", *allow)};
    }
    try {
        HttpReply reply = handler->second(request);
        if (reply.status < 100 || reply.status > 599) {
            AFD_LOG_ERROR("admin HTTP server: handler for {} {} returned status {}", request.method, request.path,
                          reply.status);
            return HttpReply{500, "text/plain; charset=utf-8", "handler returned an invalid status\n"};
        }
        return reply;
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("admin HTTP server: handler for {} {} threw: {}", request.method, request.path, e.what());
        return HttpReply{500, "text/plain; charset=utf-8", "internal error\n"};
    }
}

}  // namespace afd::transport
