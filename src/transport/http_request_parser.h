// The request head of the admin HTTP server: the request line and the header fields of an HTTP/1.1 request, as
// bytes from an untrusted client. Pure functions, no sockets: the server frames the head (everything before the
// blank line) and decides about the body from the declared Content-Length.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace afd::transport {

struct HttpRequest {
    std::string method;  // as sent, e.g. "GET"
    std::string path;    // the target up to '?', e.g. "/ready" (not percent-decoded)
    std::string query;   // the target after '?', empty when absent
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed, in order
    std::string body;

    // The first header called `name` (lower-case), or nullptr.
    const std::string* header(std::string_view name) const;
};

// A request the server answers itself instead of a handler: the status to send and why.
struct HttpRejection {
    int status;  // 400 malformed, 413 Content-Length too large, 501 Transfer-Encoding, 505 not HTTP/1.x
    std::string message;
};

// Parses `head` (the request line and header lines, CRLF-separated, without the blank line that ends them).
// On success fills method, path, query and headers of `request` (not the body) and sets `content_length` to the
// declared body length (0 without a Content-Length header) and returns std::nullopt. Rules: 'METHOD /target
// HTTP/d.d' with single spaces, a token method, a target starting with '/' without control characters or
// spaces, major version 1; 'Name: value' header lines with token names, no folding, values without CR, LF or
// NUL; no Transfer-Encoding; Content-Length a decimal that fits 64 bits, repeated only with the same value.
// On failure `request` may be partly filled.
std::optional<HttpRejection> parseRequestHead(std::string_view head, HttpRequest& request, uint64_t& content_length);

}  // namespace afd::transport
