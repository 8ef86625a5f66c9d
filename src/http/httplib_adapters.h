// cpp-httplib's side of HttpServer (internal to the http layer; included by http_server.cpp and its own .cpp only,
// since it brings in httplib.h): the classes through which the server plugs its own connection handling into
// cpp-httplib (the Stream it parses from, the task queue it hands sockets to, its Server with the socket hook, the
// writer of a streamed body), and the conversions between cpp-httplib's requests and responses and the layer's
// messages (http_message.h).
#pragma once

// The switches of httplib.h must match the library's build (cmake/AfdHttpDeps.cmake).
#include <httplib.h>
#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT)
#error \
    "httplib.h must be compiled with CPPHTTPLIB_OPENSSL_SUPPORT, as Debian's libcpp-httplib is (afd::httplib sets it)"
#endif

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "http/connection_io.h"
#include "http/http_message.h"
#include "http/request_framing.h"
#include "http/worker_pool.h"

namespace afd::http::detail {

// What the server itself answers about a request, by status, when cpp-httplib refused it without a message.
std::string_view refusalMessage(int status);

// A client's text quoted in a message, cut short (at 200 bytes, then "...").
std::string shortened(std::string_view text);

// The server's own answer to a refused request: `rejection`'s status and errorBody() JSON, Allow when `allow` is
// not empty, Connection: close.
void fillRejection(httplib::Response& response, const HttpRejection& rejection, const std::string& allow);

// The request as a handler sees it: names lower-cased, cpp-httplib's own REMOTE_ADDR-style entries left out, the
// query split off the target.
HttpRequest toRequest(const httplib::Request& request);

// cpp-httplib's view of a connection's bytes; `io` outlives the stream.
class LibraryStream final : public httplib::Stream {
public:
    explicit LibraryStream(ConnectionIo& io) : io_(io) {}
    bool is_readable() const override { return io_.readable(); }
    bool is_writable() const override { return io_.writable(); }
    ssize_t read(char* data, size_t size) override { return io_.read(data, size); }
    ssize_t write(const char* data, size_t size) override { return io_.write(data, size); }
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    socket_t socket() const override { return io_.fd(); }

private:
    ConnectionIo& io_;
};

// cpp-httplib's server, with every accepted socket handed to `serve_socket` (which owns it from then on, on a
// thread of the task queue).
class Library final : public httplib::Server {
public:
    explicit Library(std::function<void(int)> serve_socket) : serve_socket_(std::move(serve_socket)) {}

    // cpp-httplib's parsing, routing and writing of one request, on a stream of this layer.
    bool processRequest(httplib::Stream& stream, bool close_connection, bool& connection_closed,
                        const std::function<void(httplib::Request&)>& setup_request) {
        return process_request(stream, close_connection, connection_closed, setup_request);
    }
    void raiseBacklog(int backlog);
    // Closes the listening socket; the accepting loop ends (cpp-httplib's stop() does the same, but only once the
    // loop runs). Idempotent.
    void closeListener();

private:
    // NOTE: cpp-httplib's extension point (its SSLServer overrides it too).
    bool process_and_close_socket(socket_t sock) override {
        serve_socket_(sock);
        return true;
    }

    std::function<void(int)> serve_socket_;
};

// cpp-httplib's task queue on the layer's bounded pool: when it is full, the job runs at once on the accepting
// thread with refusing() true for its duration (the job then answers 503 and closes), so that no socket waits
// without bound.
class PooledQueue final : public httplib::TaskQueue {
public:
    PooledQueue(int num_threads, int max_queued) : pool_(num_threads, max_queued) {}
    void enqueue(std::function<void()> job) override;
    void shutdown() override { pool_.shutdown(); }

    // True while the calling thread runs a job this queue refused.
    static bool refusing();

private:
    WorkerPool pool_;
};

// A streaming reply's writer over cpp-httplib's chunk sink, for the connection `fd`; connected() is false once
// `stopping` is set or the peer closed. Used by the producer's thread only.
class ChunkWriter final : public StreamWriter {
public:
    ChunkWriter(httplib::DataSink& sink, int fd, const std::atomic<bool>& stopping)
        : sink_(sink), fd_(fd), stopping_(stopping) {}

    bool write(std::string_view bytes) override;
    bool connected() override;
    bool stopping() const override { return stopping_.load(); }
    bool failed() const { return failed_; }

private:
    httplib::DataSink& sink_;
    const int fd_;
    const std::atomic<bool>& stopping_;
    bool failed_ = false;
};

}  // namespace afd::http::detail
