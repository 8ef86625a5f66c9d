// The messages of the http layer (DESIGN.md §4): what a route handler receives and returns, and the writer a
// streaming handler writes its body through. No library types here: cpp-httplib stays inside the layer's .cpp files.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace afd::http {

// A request as a handler sees it: the server has read and checked its head and its whole body.
struct HttpRequest {
    std::string method;  // "GET", "POST", …; a HEAD request reaches the GET handler with method "HEAD"
    std::string path;    // percent-decoded, without the query: "/v1/completions"
    std::string query;   // the raw target after '?', empty when absent
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed, sorted by name
    std::string body;
    std::string remote_address;  // the client's IP address, e.g. "127.0.0.1"
    int remote_port = 0;
    // Without blocking, while the handler runs (from the handler's thread): false once the client closed or reset
    // its end (or half-closed it), or the server is stopping. A handler that waits long before it answers (a
    // generation answered whole) checks it between waits, so that work nobody will read is cancelled. Null in a
    // request that did not come from a server (tests): treat as connected.
    std::function<bool()> client_connected;

    // The first header called `lower_case_name`, or nullptr.
    const std::string* header(std::string_view lower_case_name) const;
};

// The body of a streaming reply, written while the request is in flight (chunked transfer encoding: each write is
// one chunk, on the wire when write() returns). Lives for the producer's call only and is used by the thread that
// runs the producer (the server thread serving that request).
class StreamWriter {
public:
    virtual ~StreamWriter() = default;

    // Sends `bytes` as one chunk (empty: nothing, true). False once the client is gone, a write made no progress
    // within the server's write timeout, or the server's stop grace ran out; every later call is false too, and
    // the producer should return.
    virtual bool write(std::string_view bytes) = 0;

    // Without blocking: false once the client closed or reset its end (or half-closed it), a write failed, or the
    // server is stopping. A producer that waits for data checks it between waits (every 50 ms, say), so that work
    // nobody will read is cancelled; the stop() bound of the server relies on it.
    virtual bool connected() = 0;

    // True once the server's stop() began (connected() is false then): within the stop grace write() still works,
    // so the producer may end the stream with a last event saying why.
    virtual bool stopping() const = 0;

    // Server-sent events (http/sse.h): one "data:" event, and a comment line that clients skip (a heartbeat).
    bool writeEvent(std::string_view data);
    bool writeComment(std::string_view text);
};

// Writes a streaming reply's body; returns when the body is complete. An exception ends the stream unfinished
// (the client sees the connection close without the last chunk) and is logged.
using StreamProducer = std::function<void(StreamWriter&)>;

// What a handler returns. Either a whole body, or (stream set) a producer that writes the body while the request
// is in flight; status, content type and headers go out before the producer runs.
struct HttpReply {
    int status = 200;  // 100..599; anything else is answered 500
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;                                          // ignored when stream is set
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers (not Content-Type or Content-Length)
    StreamProducer stream;

    static HttpReply text(int status, std::string body);
    static HttpReply json(int status, std::string body);  // application/json
    // An error with errorBody()'s JSON body.
    static HttpReply error(int status, std::string_view message, std::string_view type = {},
                           std::string_view param = {});
    // 200, text/event-stream, Cache-Control: no-cache, the body written by `producer`.
    static HttpReply eventStream(StreamProducer producer);
};

// Handlers run on the server's threads, several at once: they must be thread-safe. A handler that throws is
// answered 500 (and logged).
using HttpHandler = std::function<HttpReply(const HttpRequest&)>;

// OpenAI's error object, so that API clients read the errors of every route alike:
// {"error":{"message":M,"type":T,"param":P,"code":status}}. An empty `type` takes defaultErrorType(status); an
// empty `param` (the request field at fault) is null.
std::string errorBody(int status, std::string_view message, std::string_view type = {}, std::string_view param = {});
// "invalid_request_error" for 4xx, "server_error" for 5xx (OpenAI's names), "error" otherwise.
std::string_view defaultErrorType(int status);

}  // namespace afd::http
