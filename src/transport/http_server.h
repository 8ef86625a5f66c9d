// HttpServer: a small HTTP/1.1 server for a process's admin endpoints (/health, /ready, /stop, /status,
// /metrics). One thread serves every connection with poll(); each connection carries one request and is closed
// after the reply (`Connection: close`).
//
// Limits: request line + headers at most `max_header_bytes` (431 above), body at most `max_body_bytes` (413
// above, judged from Content-Length before the body is read); a request must arrive completely within
// `read_timeout` of the accept (408 after); request bodies must use Content-Length (Transfer-Encoding → 501).
// Malformed requests get 400, unknown paths 404, a known path with another method 405 (with `Allow`).
//
// Threads: routes are added before start(). Handlers run ON THE SERVER THREAD, one at a time, so they must
// return quickly and never block (to stop the process, a /stop handler sets a flag or notifies a waiter; it
// must not call stop() on this server). A handler that throws gets a 500. start(), stop() and port() may be
// called from any thread except the server thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"
#include "transport/http_request_parser.h"

namespace afd::transport {

struct HttpReply {
    int status = 200;  // 100..599; anything else is sent as 500
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
};

using HttpHandler = std::function<HttpReply(const HttpRequest&)>;

struct HttpServerOptions {
    std::string host = "127.0.0.1";  // address to bind; the admin surface stays on loopback by default
    int port = 0;                    // 0 = an ephemeral port (see HttpServer::port())
    std::chrono::milliseconds read_timeout{5000};
    size_t max_header_bytes = 16 * 1024;
    size_t max_body_bytes = 1024 * 1024;
    int max_connections = 64;  // further clients wait in the listen backlog
};

class HttpServer {
public:
    explicit HttpServer(HttpServerOptions options = {});
    ~HttpServer();  // stop()
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Registers `handler` for `method` `path` (exact match). Precondition: before start(), and not registered
    // yet (AFD_CHECK).
    void addRoute(std::string method, std::string path, HttpHandler handler);

    // Binds and listens on options.host:options.port and starts the server thread. Errors (kIoError, kNotFound
    // for an unresolvable host) name the address. Precondition: not started yet (AFD_CHECK).
    core::Status start();

    // The bound port; 0 before start().
    int port() const { return port_.load(std::memory_order_acquire); }

    // Stops the thread and closes the listening socket and every connection (clients see EOF or a reset).
    // Returns once the thread has exited: promptly, or after the handler running at that moment returns.
    // Idempotent.
    void stop();

private:
    struct Connection;

    void serve(std::stop_token stop_token);
    // Accepts queued clients up to max_connections; false when the process ran out of descriptors.
    bool acceptPending(std::vector<Connection>& connections);
    // Reads what arrived; once a request is complete (or rejected), builds the reply and starts writing it.
    void readFrom(Connection& connection);
    void writeReply(Connection& connection);
    HttpReply route(const HttpRequest& request, std::string* allow) const;

    const HttpServerOptions options_;
    // path → method → handler; written before start() only, then read by the server thread.
    std::map<std::string, std::map<std::string, HttpHandler>> routes_;
    core::UniqueFd listen_fd_;
    core::UniqueFd wake_read_;  // the server thread polls it; stop() writes one byte to wake_write_
    core::UniqueFd wake_write_;
    std::atomic<int> port_{0};
    std::mutex lifecycle_mutex_;  // serialises start() and stop()
    bool started_ = false;
    std::jthread thread_;
};

}  // namespace afd::transport
