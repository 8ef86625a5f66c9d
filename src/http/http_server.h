// HttpServer: HTTP/1.1 on cpp-httplib (Debian's libcpp-httplib) for the admin endpoints of every process and for the
// API server: exact-path routes, whole or streamed (SSE) replies, a bounded pool of threads, limits on what a client
// can send, and a stop() that returns within a bound.
//
// Lifecycle: addRoute()… → bind() (listens: a taken port fails here, before a process loads anything) → addRoute()…
// → start() (serves) → stop(). start() binds first when bind() was not called. Clients that connect between bind()
// and start() wait in the listen backlog and are served once start() runs.
//
// Requests: the head (request line and headers) must fit in max_header_bytes (431 above) and the body, which must
// come with Content-Length, in max_body_bytes (413 above, judged from Content-Length before the body is read;
// Transfer-Encoding → 501). A request must arrive completely within read_timeout of its first byte (of the accept,
// for a connection's first request), else 408. Malformed requests get 400 (cpp-httplib's rules: a known method,
// HTTP/1.0 or 1.1, header lines of at most 8 KiB, a request line of at most 8 KiB → 414). Unknown paths get 404,
// a known path with another method 405 with Allow. Every error the server answers itself carries errorBody()'s
// JSON and closes the connection; replies of handlers keep it open (keep-alive) up to max_keep_alive_requests.
// Responses are never compressed and Range is ignored (so streams are never held back by a compressor).
//
// Threads: each connection is served by one of num_threads workers for as long as it is open (a streaming reply
// holds its worker for the whole stream, an idle keep-alive connection for up to keep_alive_timeout). At most
// max_queued_connections wait for a worker; beyond that a new connection is answered 503 and closed at once.
// Handlers run on the workers, many at once. Creating an HttpServer sets SIGPIPE to ignored for the process
// (cpp-httplib's server does so; the layer's own sends never raise it).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/http_message.h"

namespace afd::http {

struct HttpServerOptions {
    std::string name = "HTTP server";  // in logs and error messages, e.g. "admin HTTP server"
    std::string host = "127.0.0.1";    // the address to bind; loopback unless a caller says otherwise
    int port = 0;                      // 0: an ephemeral port (see HttpServer::port())
    int num_threads = 8;
    int max_queued_connections = 64;
    std::chrono::milliseconds read_timeout{5000};
    std::chrono::milliseconds write_timeout{5000};  // a write that makes no progress this long fails
    std::chrono::seconds keep_alive_timeout{5};     // idle time allowed between two requests of a connection
    int max_keep_alive_requests = 100;
    size_t max_header_bytes = 16 * 1024;
    size_t max_body_bytes = 1024 * 1024;
    // How long stop() lets handlers in flight finish (streaming producers see connected() false) before it closes
    // their connections.
    std::chrono::milliseconds stop_grace{1000};

    // kInvalidArgument naming the field for counts below 1, non-positive times, an empty host, a port outside
    // [0, 65535].
    core::Status validate() const;
};

class HttpServer {
public:
    explicit HttpServer(HttpServerOptions options = {});
    ~HttpServer();  // stop()
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Registers `handler` for `method` (GET, POST, PUT, PATCH, DELETE or OPTIONS; GET also answers HEAD) on `path`
    // (exact match, percent-decoded, without the query). Precondition (AFD_CHECK): before start(), the method is
    // one of those, the path starts with '/', and the route is new.
    void addRoute(std::string method, std::string path, HttpHandler handler);

    // Binds and listens on options.host:options.port. Errors name the server and the address: kInvalidArgument
    // (options), kNotFound (the host does not resolve), kIoError (the port is taken or the address cannot be bound,
    // with the system's reason). Precondition (AFD_CHECK): called once, before start() and stop().
    core::Status bind();

    // Starts serving (binds first if bind() was not called; its errors then). Precondition (AFD_CHECK): once, not
    // after stop().
    core::Status start();

    // The bound port; 0 before bind().
    int port() const;

    // Stops accepting (new clients are refused), closes idle connections and half-received requests at once, gives
    // handlers in flight options.stop_grace, then closes every connection and joins the threads. Returns within
    // about stop_grace plus the time a handler that ignores StreamWriter::connected() keeps running. Idempotent;
    // any thread except the server's own (AFD_CHECK: a handler must not call it).
    void stop();

    const HttpServerOptions& options() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace afd::http
