#include "http/http_client.h"

// cpp-httplib is included by this file and httplib_adapters.h only (cmake/AfdHttpDeps.cmake says why).
#include <httplib.h>
#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT)
#error \
    "httplib.h must be compiled with CPPHTTPLIB_OPENSSL_SUPPORT, as Debian's libcpp-httplib is (afd::httplib sets it)"
#endif

#include <netdb.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

namespace afd::http {
namespace {

using Clock = std::chrono::steady_clock;

// cpp-httplib's client sends without MSG_NOSIGNAL: a write to a connection the server already closed would raise
// SIGPIPE, whose default action ends the process. The signal is directed at the writing thread, so blocking it
// there for the call, and taking a SIGPIPE that arrived meanwhile, keeps it from the process.
class SigpipeBlock {
public:
    SigpipeBlock() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_mask_);
    }
    ~SigpipeBlock() {
        if (!was_pending_) {
            sigset_t pending;
            sigpending(&pending);
            if (sigismember(&pending, SIGPIPE) == 1) {
                const timespec no_wait{0, 0};
                while (sigtimedwait(&pipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
                }
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    }
    SigpipeBlock(const SigpipeBlock&) = delete;
    SigpipeBlock& operator=(const SigpipeBlock&) = delete;

private:
    sigset_t pipe_{};
    sigset_t old_mask_{};
    bool was_pending_ = false;
};

bool sendable(std::string_view text) { return text.find_first_of("\r\n \t") == std::string_view::npos; }

bool resolves(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
    if (list != nullptr) ::freeaddrinfo(list);
    return gai == 0;
}

template <typename Duration>
std::pair<time_t, time_t> secondsAndMicros(Duration duration) {
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(duration).count();
    return {static_cast<time_t>(micros / 1'000'000), static_cast<time_t>(micros % 1'000'000)};
}

}  // namespace

const std::string* HttpResponse::header(std::string_view lower_case_name) const {
    for (const auto& [name, value] : headers) {
        if (name == lower_case_name) return &value;
    }
    return nullptr;
}

struct HttpClient::Impl {
    Impl(std::string host_in, int port_in, HttpClientOptions options_in)
        : host(std::move(host_in)), port(port_in), options(options_in), client(host, port) {
        const auto [connect_s, connect_us] = secondsAndMicros(options.connect_timeout);
        const auto [timeout_s, timeout_us] = secondsAndMicros(options.timeout);
        client.set_connection_timeout(connect_s, connect_us);
        client.set_read_timeout(timeout_s, timeout_us);
        client.set_write_timeout(timeout_s, timeout_us);
        client.set_keep_alive(options.keep_alive);
        client.set_tcp_nodelay(true);
        client.set_follow_location(false);
    }

    core::Result<HttpResponse> call(std::string_view method, std::string_view path, std::string_view body,
                                    std::string_view content_type, const BodyCallback* on_piece);

    const std::string host;
    const int port;
    const HttpClientOptions options;
    httplib::ClientImpl client;
    std::mutex call_mutex;  // one call at a time
    std::atomic<bool> in_call{false};
    std::atomic<bool> aborted{false};
};

core::Result<HttpResponse> HttpClient::Impl::call(std::string_view method, std::string_view path, std::string_view body,
                                                  std::string_view content_type, const BodyCallback* on_piece) {
    const std::string where = fmt::format("HTTP {} {}:{}{}", method, host, port, path);
    if (method.empty() || !sendable(method) || path.empty() || path.front() != '/' || !sendable(path) ||
        content_type.find_first_of("\r\n") != std::string_view::npos) {
        return core::invalidArgument("{}: the method, path or content type cannot be sent in a request", where);
    }
    for (const auto& [name, value] : options.headers) {
        if (name.empty() || name.find_first_of(":\r\n") != std::string::npos ||
            value.find_first_of("\r\n") != std::string::npos) {
            return core::invalidArgument("{}: header '{}' cannot be sent in a request", where, name);
        }
    }
    std::lock_guard lock(call_mutex);
    SigpipeBlock no_sigpipe;
    aborted = false;
    in_call = true;

    HttpResponse response;
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + options.timeout;
    Clock::time_point last_progress = start;
    bool streaming = false;
    bool stopped_by_caller = false;
    bool too_large = false;
    bool past_deadline = false;

    httplib::Request request;
    request.method = std::string(method);
    request.path = std::string(path);
    for (const auto& [name, value] : options.headers) request.set_header(name, value);
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
        request.body = std::string(body);
        request.set_header("Content-Type", std::string(content_type));
    }
    request.response_handler = [&](const httplib::Response& head) {
        last_progress = Clock::now();
        streaming = on_piece != nullptr && head.status >= 200 && head.status < 300;
        return !aborted.load();
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
        last_progress = Clock::now();
        if (aborted) return false;
        if (streaming) {
            if ((*on_piece)(std::string_view(data, size))) return true;
            stopped_by_caller = true;
            return false;
        }
        if (response.body.size() + size > options.max_body_bytes) {
            too_large = true;
            return false;
        }
        response.body.append(data, size);
        if (on_piece == nullptr && Clock::now() > deadline) {
            past_deadline = true;
            return false;
        }
        return true;
    };
    httplib::Response reply;
    httplib::Error error = httplib::Error::Success;
    const bool ok = client.send(request, reply, error);
    in_call = false;

    response.status = reply.status;
    response.content_type = reply.get_header_value("Content-Type");
    for (const auto& [name, value] : reply.headers) {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        response.headers.emplace_back(std::move(lower), value);
    }
    if (ok || stopped_by_caller) return response;
    if (aborted) return core::makeStatus(core::StatusCode::kCancelled, "{}: aborted", where);
    if (too_large) return core::corrupt("{}: the reply body exceeds {} bytes", where, options.max_body_bytes);
    if (past_deadline) return core::timeoutError("{}: no complete reply within {} ms", where, options.timeout.count());
    switch (error) {
        case httplib::Error::Connection:
            if (!resolves(host)) return core::notFound("{}: cannot resolve the host", where);
            return core::ioError("{}: cannot connect (refused or unreachable)", where);
        case httplib::Error::ConnectionTimeout:
            return core::timeoutError("{}: no connection within {} ms", where, options.connect_timeout.count());
        case httplib::Error::Read:
            // cpp-httplib reports a silent server and a closed connection alike; the time since the last bytes tells.
            if (Clock::now() - last_progress >= options.timeout - std::chrono::milliseconds(5)) {
                return core::timeoutError("{}: no reply bytes for {} ms", where, options.timeout.count());
            }
            return core::peerLost("{}: the connection closed before a complete reply", where);
        case httplib::Error::Write:
            return core::peerLost("{}: the connection closed while the request was sent", where);
        case httplib::Error::Canceled:
            return core::makeStatus(core::StatusCode::kCancelled, "{}: cancelled", where);
        default:
            return core::ioError("{}: {}", where, httplib::to_string(error));
    }
}

HttpClient::HttpClient(std::string host, int port, HttpClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(host), port, options)) {}

HttpClient::~HttpClient() = default;

core::Result<HttpResponse> HttpClient::get(std::string_view path) { return send("GET", path); }

core::Result<HttpResponse> HttpClient::post(std::string_view path, std::string_view body,
                                            std::string_view content_type) {
    return send("POST", path, body, content_type);
}

core::Result<HttpResponse> HttpClient::send(std::string_view method, std::string_view path, std::string_view body,
                                            std::string_view content_type) {
    return impl_->call(method, path, body, content_type, nullptr);
}

core::Result<HttpResponse> HttpClient::stream(std::string_view method, std::string_view path, std::string_view body,
                                              const BodyCallback& on_piece, std::string_view content_type) {
    return impl_->call(method, path, body, content_type, &on_piece);
}

core::Result<HttpResponse> HttpClient::streamEvents(std::string_view method, std::string_view path,
                                                    std::string_view body, const EventCallback& on_event,
                                                    std::string_view content_type) {
    SseParser parser;
    std::optional<core::Status> parse_error;
    const BodyCallback on_piece = [&](std::string_view piece) {
        core::Status status = parser.feed(piece, on_event);
        if (status.isOk()) return true;
        if (status.code() != core::StatusCode::kCancelled) parse_error = std::move(status);
        return false;
    };
    core::Result<HttpResponse> response = impl_->call(method, path, body, content_type, &on_piece);
    if (parse_error) {
        return parse_error->withContext(fmt::format("HTTP {} {}:{}{}", method, impl_->host, impl_->port, path));
    }
    return response;
}

void HttpClient::abort() {
    if (!impl_->in_call) return;
    impl_->aborted = true;
    impl_->client.stop();
}

core::Result<HttpResponse> httpRequest(const std::string& host, int port, std::string_view method,
                                       std::string_view path, std::string_view body, std::chrono::milliseconds timeout,
                                       std::string_view content_type) {
    HttpClientOptions options;
    options.connect_timeout = timeout;
    options.timeout = timeout;
    return HttpClient(host, port, options).send(method, path, body, content_type);
}

}  // namespace afd::http
