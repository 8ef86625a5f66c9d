// HttpClient: HTTP/1.1 requests on cpp-httplib, for a launcher polling /ready and posting /stop, for tests, and for
// the load client of `afd bench serve`: whole replies, and streamed ones read piece by piece or event by event
// (http/sse.h). Plain HTTP only.
//
// Threads: one request at a time per client (concurrent calls wait for each other); abort() from any thread. A
// call never raises SIGPIPE, whatever the process does with that signal.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/sse.h"

namespace afd::http {

struct HttpResponse {
    int status = 0;
    std::string content_type;  // empty when the server sent none
    std::string body;          // a streamed 2xx reply's body went to the callback instead
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, sorted by name

    // The first header called `lower_case_name`, or nullptr.
    const std::string* header(std::string_view lower_case_name) const;
};

struct HttpClientOptions {
    std::chrono::milliseconds connect_timeout{5000};
    // get/post/send: the whole exchange. stream/streamEvents: each wait for the next bytes (a stream may run longer).
    std::chrono::milliseconds timeout{10000};
    bool keep_alive = false;                   // reuse one connection across calls
    size_t max_body_bytes = size_t{64} << 20;  // a larger body (not streamed) fails the call with kCorrupt
    // Sent with every request, e.g. {"Authorization", "Bearer TOKEN"}; a name or value with a line break fails the
    // call with kInvalidArgument.
    std::vector<std::pair<std::string, std::string>> headers;
};

// Gets each piece of a streamed body as it arrives; false stops reading.
using BodyCallback = std::function<bool(std::string_view piece)>;
// Gets each server-sent event; false stops reading.
using EventCallback = std::function<bool(const SseEvent& event)>;

class HttpClient {
public:
    HttpClient(std::string host, int port, HttpClientOptions options = {});
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // A whole reply of any status. Errors name the method, host:port and path: kInvalidArgument (a method or path
    // that cannot be sent: empty, not starting with '/', with spaces or line breaks), kNotFound (the host does not
    // resolve), kIoError (the connection was refused or failed), kTimeout (past options.timeout), kPeerLost (the
    // connection closed before a complete reply), kCorrupt (a body over max_body_bytes), kCancelled (abort()).
    core::Result<HttpResponse> get(std::string_view path);
    core::Result<HttpResponse> post(std::string_view path, std::string_view body,
                                    std::string_view content_type = "application/json");
    core::Result<HttpResponse> send(std::string_view method, std::string_view path, std::string_view body = {},
                                    std::string_view content_type = "application/json");

    // The body of a 2xx reply goes to `on_piece` as it arrives (the response returned carries status and headers);
    // any other reply's body is collected in the response. When `on_piece` returns false the connection is closed
    // (the server sees the client leave) and the call returns the response so far, ok. Errors as for send(), with
    // kTimeout meaning no bytes came for options.timeout.
    core::Result<HttpResponse> stream(std::string_view method, std::string_view path, std::string_view body,
                                      const BodyCallback& on_piece, std::string_view content_type = "application/json");
    // stream() of a text/event-stream body through an SseParser: `on_event` gets each event. kCorrupt as well for an
    // event over 1 MiB.
    core::Result<HttpResponse> streamEvents(std::string_view method, std::string_view path, std::string_view body,
                                            const EventCallback& on_event,
                                            std::string_view content_type = "application/json");

    // Ends the call in flight, if any, from another thread: it returns kCancelled and its connection is closed.
    void abort();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// One request on a connection of its own: HttpClient(host, port, {timeout, timeout}).send(…).
core::Result<HttpResponse> httpRequest(const std::string& host, int port, std::string_view method,
                                       std::string_view path, std::string_view body, std::chrono::milliseconds timeout,
                                       std::string_view content_type = "application/json");

}  // namespace afd::http
