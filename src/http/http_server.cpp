#include "http/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "http/connection_io.h"
#include "http/httplib_adapters.h"  // the only file besides http_client.cpp that brings in httplib.h
#include "http/request_framing.h"
#include "http/socket_io.h"

namespace afd::http {
namespace {

using detail::ChunkWriter;
using detail::Clock;
using detail::fillRejection;
using detail::Library;
using detail::LibraryStream;
using detail::PooledQueue;
using detail::refusalMessage;
using detail::shortened;
using detail::toRequest;
using HandlerResponse = httplib::Server::HandlerResponse;

// cpp-httplib listens with a backlog of 5: a burst of clients would wait for SYN retransmits (a second or more).
constexpr int kListenBacklog = 1024;
constexpr auto kMaxLinger = std::chrono::milliseconds(1000);
constexpr size_t kMaxLingerBytes = size_t{8} << 20;
constexpr auto kRefusalSendTimeout = std::chrono::milliseconds(20);
constexpr std::string_view kMethods[] = {"DELETE", "GET", "OPTIONS", "PATCH", "POST", "PUT"};

// One accepted connection, for as long as a worker serves it.
struct Connection {
    Connection(int fd_in, const HttpServerOptions& options)
        : fd(fd_in), io(fd_in, options.max_header_bytes, options.write_timeout), stream(io) {}
    const int fd;
    detail::ConnectionIo io;
    LibraryStream stream;
    std::optional<HttpRejection> rejection;  // found in the head; answered before routing
    bool prepared = false;                   // the head parsed (prepareRequest ran)
    bool routed = false;                     // a route handler made this request's reply
    bool body_unread = false;                // a body cpp-httplib does not read (a GET's): close after the reply
    bool in_handler = false;                 // guarded by HttpServer::Impl::connections_mutex
};

// The connection the calling worker serves, and the server it serves it for (cpp-httplib's callbacks carry neither).
thread_local Connection* t_connection = nullptr;
thread_local const void* t_server = nullptr;

}  // namespace

// Everything of one server: options, routes, cpp-httplib's server, the connections being served.
struct HttpServer::Impl {
    explicit Impl(HttpServerOptions options_in);

    core::Status bindLocked();
    core::Status bindFailure() const;
    void stop();

    // The connection loop (on a worker): requests one after the other while the connection stays usable.
    void serveSocket(int fd);
    bool serveRequests(Connection& c);  // true: the last reply left request bytes unread (linger before closing)
    void prepareRequest(Connection& c, httplib::Request& request) const;
    std::optional<HttpRejection> checkRoute(const std::string& method, const std::string& path,
                                            std::string* allow) const;
    void dispatch(const httplib::Request& request, httplib::Response& response);
    bool runProducer(const StreamProducer& producer, httplib::DataSink& sink, Connection& c);

    bool track(Connection* c);
    void untrack(Connection* c);
    void setInHandler(Connection* c, bool in_handler);
    void shutdownConnections(bool spare_handlers);

    const HttpServerOptions options;
    Library library;
    std::map<std::string, std::map<std::string, HttpHandler>> routes;  // path → method → handler; fixed at start()

    enum class State { kNew, kBound, kServing, kStopped };
    std::mutex lifecycle_mutex;
    State state = State::kNew;
    std::atomic<int> port{0};
    std::atomic<bool> stopping{false};
    std::jthread acceptor;

    std::mutex connections_mutex;
    std::condition_variable connections_cv;
    std::set<Connection*> connections;
    int handlers_in_flight = 0;
};

HttpServer::Impl::Impl(HttpServerOptions options_in)
    : options(std::move(options_in)), library([this](int fd) { serveSocket(fd); }) {
    library.new_task_queue = [this] { return new PooledQueue(options.num_threads, options.max_queued_connections); };
    // NOTE: cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and share its
    // clients; SO_REUSEADDR alone still allows a restart while old connections linger in TIME_WAIT.
    library.set_socket_options([](socket_t sock) {
        const int one = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    });
    library.set_tcp_nodelay(true);
    library.set_keep_alive_max_count(static_cast<size_t>(std::max(1, options.max_keep_alive_requests)));
    library.set_keep_alive_timeout(static_cast<time_t>(options.keep_alive_timeout.count()));
    library.set_payload_max_length(options.max_body_bytes);
    library.set_pre_routing_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& request, httplib::Response& response) {
            const Connection* c = t_connection;
            std::string allow;
            std::optional<HttpRejection> rejection =
                c != nullptr && c->rejection ? c->rejection : checkRoute(request.method, request.path, &allow);
            if (!rejection) return HandlerResponse::Unhandled;
            fillRejection(response, *rejection, allow);
            return HandlerResponse::Handled;
        }));
    library.set_expect_100_continue_handler([this](const httplib::Request& request, httplib::Response& response) {
        // Refused requests are answered before the client sends the body.
        const Connection* c = t_connection;
        std::string allow;
        std::optional<HttpRejection> rejection =
            c != nullptr && c->rejection ? c->rejection : checkRoute(request.method, request.path, &allow);
        if (!rejection) return 100;
        fillRejection(response, *rejection, allow);
        return rejection->status;
    });
    // Every reply of 400 or more that cpp-httplib writes passes here: the server's own get a JSON body, a
    // Content-Length and close the connection; handlers' replies pass as they are.
    library.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& response) {
            const Connection* c = t_connection;
            if (c != nullptr && c->routed) return HandlerResponse::Unhandled;
            if (response.body.empty()) {
                response.set_content(errorBody(response.status, refusalMessage(response.status)), "application/json");
            }
            if (!response.has_header("Connection")) response.set_header("Connection", "close");
            if (c != nullptr && c->prepared) return HandlerResponse::Handled;  // cpp-httplib counts Content-Length
            // A head that did not parse: the request still has its Accept-Encoding, and counting through cpp-httplib
            // would compress the body. Counted here instead.
            response.set_header("Content-Length", std::to_string(response.body.size()));
            return HandlerResponse::Unhandled;
        }));
    library.set_exception_handler(
        [this](const httplib::Request& request, httplib::Response& response, std::exception_ptr error) {
            std::string what = "non-standard exception";
            try {
                if (error) std::rethrow_exception(error);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            AFD_LOG_ERROR("{}: {} {} failed: {}", options.name, request.method, shortened(request.path), what);
            response.status = 500;
            response.set_content(errorBody(500, "internal error"), "application/json");
        });
    // NOTE: the pre-routing handler has matched the path against the routes before these run, so the pattern only
    // ever sees registered paths (std::regex on long client input could recurse deeply).
    const httplib::Server::Handler handler = [this](const httplib::Request& request, httplib::Response& response) {
        dispatch(request, response);
    };
    library.Get(".*", handler);
    library.Post(".*", handler);
    library.Put(".*", handler);
    library.Patch(".*", handler);
    library.Delete(".*", handler);
    library.Options(".*", handler);
}

core::Status HttpServerOptions::validate() const {
    const auto bad = [this](std::string_view what) { return core::invalidArgument("{}: {}", name, what); };
    if (host.empty()) return bad("host is empty");
    if (port < 0 || port > 65535) return bad(fmt::format("port {} is outside [0, 65535]", port));
    if (num_threads < 1) return bad(fmt::format("num_threads {} must be at least 1", num_threads));
    if (max_queued_connections < 0)
        return bad(fmt::format("max_queued_connections {} is negative", max_queued_connections));
    if (read_timeout.count() <= 0 || write_timeout.count() <= 0 || keep_alive_timeout.count() <= 0) {
        return bad("read_timeout, write_timeout and keep_alive_timeout must be positive");
    }
    if (stop_grace.count() < 0) return bad("stop_grace is negative");
    if (max_keep_alive_requests < 1) return bad("max_keep_alive_requests must be at least 1");
    if (max_header_bytes < 64) return bad(fmt::format("max_header_bytes {} is below 64", max_header_bytes));
    return core::Status::ok();
}

core::Status HttpServer::Impl::bindLocked() {
    AFD_RETURN_IF_ERROR(options.validate());
    int bound = -1;
    if (options.port == 0) {
        bound = library.bind_to_any_port(options.host);
    } else if (library.bind_to_port(options.host, options.port)) {
        bound = options.port;
    }
    if (bound <= 0) return bindFailure();
    library.raiseBacklog(kListenBacklog);
    port = bound;
    state = State::kBound;
    AFD_LOG_DEBUG("{} bound to {}:{}", options.name, options.host, bound);
    return core::Status::ok();
}

// cpp-httplib says only that binding failed: the reason comes from binding the same address again.
core::Status HttpServer::Impl::bindFailure() const {
    const bool ipv6 = options.host.find(':') != std::string::npos;
    const std::string address = fmt::format("{}{}{}:{}", ipv6 ? "[" : "", options.host, ipv6 ? "]" : "", options.port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* raw_list = nullptr;
    const int gai = ::getaddrinfo(options.host.c_str(), std::to_string(options.port).c_str(), &hints, &raw_list);
    if (gai != 0) return core::notFound("{}: cannot resolve {}: {}", options.name, address, ::gai_strerror(gai));
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(raw_list, &::freeaddrinfo);
    int error = 0;
    for (const addrinfo* ai = list.get(); ai != nullptr && error != EADDRINUSE; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            error = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1) != 0) error = errno;
        ::close(fd);
    }
    if (error == EADDRINUSE) {
        return core::ioError("{}: cannot listen on {}: the port is in use (another server holds it)", options.name,
                             address);
    }
    return core::ioError("{}: cannot listen on {}: {}", options.name, address,
                         error != 0 ? std::strerror(error) : "binding failed");
}

void HttpServer::Impl::stop() {
    std::lock_guard lock(lifecycle_mutex);
    if (state == State::kStopped) return;
    AFD_CHECK(t_server != this, "{}: stop() called from one of its own handlers", options.name);
    const bool serving = state == State::kServing;
    state = State::kStopped;
    stopping = true;
    library.closeListener();
    if (!serving) return;
    // Idle connections and half-received requests go at once; handlers in flight get the grace.
    shutdownConnections(/*spare_handlers=*/true);
    {
        std::unique_lock connections_lock(connections_mutex);
        connections_cv.wait_for(connections_lock, options.stop_grace, [this] { return handlers_in_flight == 0; });
    }
    shutdownConnections(/*spare_handlers=*/false);
    acceptor.join();  // its loop ends with the pool's shutdown, which joins the workers
    AFD_LOG_DEBUG("{} on port {} stopped", options.name, port.load());
}

bool HttpServer::Impl::track(Connection* c) {
    std::lock_guard lock(connections_mutex);
    if (stopping) return false;
    connections.insert(c);
    return true;
}

void HttpServer::Impl::untrack(Connection* c) {
    {
        std::lock_guard lock(connections_mutex);
        if (c->in_handler) --handlers_in_flight;
        c->in_handler = false;
        connections.erase(c);
    }
    connections_cv.notify_all();
}

void HttpServer::Impl::setInHandler(Connection* c, bool in_handler) {
    {
        std::lock_guard lock(connections_mutex);
        if (c->in_handler == in_handler) return;
        c->in_handler = in_handler;
        handlers_in_flight += in_handler ? 1 : -1;
    }
    connections_cv.notify_all();
}

void HttpServer::Impl::shutdownConnections(bool spare_handlers) {
    std::lock_guard lock(connections_mutex);
    // NOTE: a connection leaves the set before its socket is closed, so every descriptor here is still open.
    for (const Connection* c : connections) {
        if (!spare_handlers || !c->in_handler) ::shutdown(c->fd, SHUT_RDWR);
    }
}

void HttpServer::Impl::serveSocket(int fd) {
    if (PooledQueue::refusing()) {
        (void)detail::sendAll(fd,
                              detail::serverErrorReply(503, fmt::format("{} is busy: every thread serves a connection "
                                                                        "and the queue is full; retry later",
                                                                        options.name)),
                              Clock::now() + kRefusalSendTimeout);
        ::shutdown(fd, SHUT_RDWR);
        ::close(fd);
        return;
    }
    // NOTE: cpp-httplib accepts without SOCK_CLOEXEC; children a process starts must not inherit client sockets.
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    try {
        Connection connection(fd, options);
        if (track(&connection)) {
            t_connection = &connection;
            t_server = this;
            bool linger = false;
            try {
                linger = serveRequests(connection);
            } catch (const std::exception& e) {
                AFD_LOG_ERROR("{}: serving a connection failed: {}", options.name, e.what());
            } catch (...) {
                AFD_LOG_ERROR("{}: serving a connection failed with a non-standard exception", options.name);
            }
            if (linger)
                detail::drainBeforeClose(fd, std::min<std::chrono::milliseconds>(options.read_timeout, kMaxLinger),
                                         kMaxLingerBytes);
            t_connection = nullptr;
            t_server = nullptr;
            untrack(&connection);
        }
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("{}: cannot serve a connection: {}", options.name, e.what());
    }
    ::close(fd);
}

bool HttpServer::Impl::serveRequests(Connection& c) {
    const Clock::time_point accepted = Clock::now();
    Clock::time_point wait_until = accepted + options.read_timeout;  // the first request must come by then
    for (int served = 0; served < options.max_keep_alive_requests; ++served) {
        if (stopping) return false;
        if (!c.io.buffered() && detail::waitFor(c.fd, POLLIN, wait_until) != detail::WaitResult::kReady) {
            return false;  // idle too long (or a failed poll): close without a word, as for a connection never used
        }
        if (stopping) return false;
        c.io.beginRequest(served == 0 ? accepted + options.read_timeout : Clock::now() + options.read_timeout);
        c.rejection.reset();
        c.prepared = false;
        c.routed = false;
        c.body_unread = false;
        bool connection_closed = false;
        const bool last = served + 1 == options.max_keep_alive_requests;
        const bool written = library.processRequest(c.stream, last, connection_closed,
                                                    [&](httplib::Request& request) { prepareRequest(c, request); });
        setInHandler(&c, false);
        if (c.io.headTooLarge() || (c.io.timedOut() && c.io.requestBytes() > 0)) {
            const int status = c.io.headTooLarge() ? 431 : 408;
            const std::string message =
                status == 431 ? fmt::format("the request head exceeds {} bytes", options.max_header_bytes)
                              : fmt::format("the request did not arrive within {} ms", options.read_timeout.count());
            (void)detail::sendAll(c.fd, detail::serverErrorReply(status, message),
                                  Clock::now() + options.write_timeout);
            return true;
        }
        if (!written) return false;                   // the client left, a write failed, or a stream ended early
        if (!c.routed || c.body_unread) return true;  // request bytes may be left: never read them as a request
        if (connection_closed) return false;
        wait_until = Clock::now() + options.keep_alive_timeout;
    }
    return false;
}

// cpp-httplib has parsed the head; the body is not read yet.
void HttpServer::Impl::prepareRequest(Connection& c, httplib::Request& request) const {
    c.io.endHead();
    c.prepared = true;
    std::vector<std::string_view> lengths;
    const auto [first, last] = request.headers.equal_range("Content-Length");
    for (auto it = first; it != last; ++it) lengths.emplace_back(it->second);
    uint64_t body_bytes = 0;
    c.rejection =
        checkRequestFraming(lengths, request.has_header("Transfer-Encoding"), options.max_body_bytes, body_bytes);
    // cpp-httplib reads the body of these methods only. Without Content-Length a request has no body (RFC 9112
    // §6.3), but cpp-httplib would read one to the end of the connection.
    const bool body_read =
        request.method == "POST" || request.method == "PUT" || request.method == "PATCH" || request.method == "DELETE";
    if (!c.rejection && lengths.empty() && body_read) request.set_header("Content-Length", "0");
    c.body_unread = !body_read && body_bytes > 0;
    request.headers.erase("Accept-Encoding");
    request.headers.erase("Range");
    request.ranges.clear();
}

std::optional<HttpRejection> HttpServer::Impl::checkRoute(const std::string& method, const std::string& path,
                                                          std::string* allow) const {
    const auto route = routes.find(path);
    if (route == routes.end()) return HttpRejection{404, fmt::format("no route for {}", shortened(path))};
    if (route->second.count(method == "HEAD" ? "GET" : method) != 0) return std::nullopt;
    for (const auto& [allowed, unused] : route->second) {
        *allow += (allow->empty() ? "" : ", ") + allowed;
        if (allowed == "GET") *allow += ", HEAD";
    }
    return HttpRejection{405, fmt::format("{} is not allowed on {} (allowed: {})", method, shortened(path), *allow)};
}

void HttpServer::Impl::dispatch(const httplib::Request& request, httplib::Response& response) {
    Connection* c = t_connection;
    const auto route = routes.find(request.path);
    const auto handler = route == routes.end() ? decltype(route->second.end()){}
                                               : route->second.find(request.method == "HEAD" ? "GET" : request.method);
    if (c == nullptr || route == routes.end() || handler == route->second.end()) {
        fillRejection(response, HttpRejection{500, "request reached no handler"}, "");
        return;
    }
    c->routed = true;
    setInHandler(c, true);
    HttpReply reply;
    try {
        HttpRequest routed = toRequest(request);
        routed.client_connected = [this, fd = c->fd] { return !stopping.load() && !detail::peerClosed(fd); };
        reply = handler->second(routed);
        if (reply.status < 100 || reply.status > 599) {
            AFD_LOG_ERROR("{}: the handler of {} {} returned status {}", options.name, request.method, request.path,
                          reply.status);
            reply = HttpReply::error(500, "the handler returned an invalid status");
        }
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("{}: the handler of {} {} threw: {}", options.name, request.method, request.path, e.what());
        reply = HttpReply::error(500, "internal error");
    } catch (...) {
        AFD_LOG_ERROR("{}: the handler of {} {} threw a non-standard exception", options.name, request.method,
                      request.path);
        reply = HttpReply::error(500, "internal error");
    }
    response.status = reply.status;
    for (const auto& [name, value] : reply.headers) {
        const bool framing = strcasecmp(name.c_str(), "Content-Type") == 0 ||
                             strcasecmp(name.c_str(), "Content-Length") == 0 ||
                             strcasecmp(name.c_str(), "Transfer-Encoding") == 0;
        if (!framing) response.set_header(name, value);  // framing is the server's
    }
    if (reply.stream) {
        response.set_chunked_content_provider(
            reply.content_type, [this, c, producer = std::move(reply.stream)](size_t, httplib::DataSink& sink) {
                return runProducer(producer, sink, *c);
            });
    } else {
        response.body = std::move(reply.body);
        response.set_header("Content-Type", reply.content_type);
    }
}

// Runs once per streaming reply, after its head went out: the whole body comes from this one call.
bool HttpServer::Impl::runProducer(const StreamProducer& producer, httplib::DataSink& sink, Connection& c) {
    ChunkWriter writer(sink, c.fd, stopping);
    try {
        producer(writer);
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("{}: a streaming reply failed: {}", options.name, e.what());
        return false;
    } catch (...) {
        AFD_LOG_ERROR("{}: a streaming reply failed with a non-standard exception", options.name);
        return false;
    }
    if (writer.failed()) return false;  // false ends the connection without the last chunk
    sink.done();
    return true;
}

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
    try {
        stop();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("{}: stop during destruction failed: {}", impl_->options.name, e.what());
    }
}

void HttpServer::addRoute(std::string method, std::string path, HttpHandler handler) {
    std::lock_guard lock(impl_->lifecycle_mutex);
    const std::string& name = impl_->options.name;
    AFD_CHECK(impl_->state == Impl::State::kNew || impl_->state == Impl::State::kBound,
              "{}: addRoute({} {}) after start()", name, method, path);
    AFD_CHECK(handler != nullptr, "{}: addRoute({} {}) without a handler", name, method, path);
    AFD_CHECK(std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods),
              "{}: addRoute({} {}): the method is not one of DELETE, GET, OPTIONS, PATCH, POST, PUT", name, method,
              path);
    AFD_CHECK(!path.empty() && path.front() == '/', "{}: addRoute({} {}): the path must start with '/'", name, method,
              path);
    auto& methods = impl_->routes[path];
    AFD_CHECK(methods.find(method) == methods.end(), "{}: route {} {} registered twice", name, method, path);
    methods.emplace(std::move(method), std::move(handler));
}

core::Status HttpServer::bind() {
    std::lock_guard lock(impl_->lifecycle_mutex);
    AFD_CHECK(impl_->state == Impl::State::kNew, "{}: bind() called twice, or after start() or stop()",
              impl_->options.name);
    return impl_->bindLocked();
}

core::Status HttpServer::start() {
    std::lock_guard lock(impl_->lifecycle_mutex);
    AFD_CHECK(impl_->state == Impl::State::kNew || impl_->state == Impl::State::kBound,
              "{}: start() called twice, or after stop()", impl_->options.name);
    if (impl_->state == Impl::State::kNew) AFD_RETURN_IF_ERROR(impl_->bindLocked());
    impl_->state = Impl::State::kServing;
    impl_->acceptor = std::jthread([impl = impl_.get()] {
        if (!impl->library.listen_after_bind() && !impl->stopping) {
            AFD_LOG_ERROR("{}: accepting connections failed; the server no longer accepts", impl->options.name);
        }
    });
    AFD_LOG_INFO("{} serving on {}:{}", impl_->options.name, impl_->options.host, impl_->port.load());
    return core::Status::ok();
}

int HttpServer::port() const { return impl_->port.load(); }

void HttpServer::stop() { impl_->stop(); }

const HttpServerOptions& HttpServer::options() const { return impl_->options; }

}  // namespace afd::http
