// How long a request's body is, decided from its headers before any body byte is read (RFC 9112 §6). Pure, for the
// server (http_server.cpp) and its fuzz target.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace afd::http {

// A request the server answers itself, without a handler: the status to send and why.
struct HttpRejection {
    int status;
    std::string message;
};

// `content_lengths`: the value of every Content-Length header of the request, in any order;
// `has_transfer_encoding`: whether it has a Transfer-Encoding header.
// On success sets `body_bytes` (0 without Content-Length) and returns nullopt. Refuses with 501 a request with
// Transfer-Encoding (a body must declare its length), with 400 a Content-Length that is not a plain decimal number
// or that is repeated with another value, with 413 one above `max_body_bytes` (however large it is).
std::optional<HttpRejection> checkRequestFraming(const std::vector<std::string_view>& content_lengths,
                                                 bool has_transfer_encoding, uint64_t max_body_bytes,
                                                 uint64_t& body_bytes);

}  // namespace afd::http
