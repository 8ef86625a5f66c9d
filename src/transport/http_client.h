// A blocking HTTP/1.1 client for one request per connection: enough for a launcher polling /ready and posting
// /stop, and for tests. Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace afd::transport {

struct HttpResponse {
    int status = 0;
    std::string content_type;  // empty when the server sent none
    std::string body;
};

// Sends `method` `path` with `body` (Content-Type `content_type`, omitted for an empty body) to host:port and
// reads the reply, all within `timeout`. Replies over 64 MiB are refused.
// Errors: kNotFound (host does not resolve), kIoError (connect refused or failed), kTimeout (the whole exchange
// ran past `timeout`), kPeerLost (closed before a complete reply), kCorrupt (not an HTTP/1.x reply). Every
// message names host:port and the path.
core::Result<HttpResponse> httpRequest(const std::string& host, int port, std::string_view method,
                                       std::string_view path, std::string_view body, std::chrono::milliseconds timeout,
                                       std::string_view content_type = "application/json");

}  // namespace afd::transport
