#include "http/request_framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace afd::http {
namespace {

// Long enough to show what was sent, short enough for an error message.
std::string quoted(std::string_view text) {
    constexpr size_t kMaxShown = 40;
    std::string shown;
    for (const char c : text.substr(0, kMaxShown)) {
        shown += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
    }
    if (text.size() > kMaxShown) shown += "...";
    return "'" + shown + "'";
}

}  // namespace

std::optional<HttpRejection> checkRequestFraming(const std::vector<std::string_view>& content_lengths,
                                                 bool has_transfer_encoding, uint64_t max_body_bytes,
                                                 uint64_t& body_bytes) {
    body_bytes = 0;
    if (has_transfer_encoding) {
        return HttpRejection{501, "Transfer-Encoding in requests is not supported: send the body with Content-Length"};
    }
    if (content_lengths.empty()) return std::nullopt;
    const std::string_view first = content_lengths.front();
    for (const std::string_view value : content_lengths) {
        if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return HttpRejection{400, fmt::format("Content-Length {} is not a decimal number", quoted(value))};
        }
        if (value != first) {
            return HttpRejection{400, fmt::format("Content-Length is given twice, as {} and {}", quoted(first),
                                                  quoted(value))};
        }
    }
    uint64_t length = 0;
    const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), length);
    if (error == std::errc::result_out_of_range || (error == std::errc() && length > max_body_bytes)) {
        return HttpRejection{413, fmt::format("the request body of {} bytes exceeds the limit of {} bytes",
                                              first.size() <= 20 ? first : "over 10^20", max_body_bytes)};
    }
    if (error != std::errc() || end != first.data() + first.size()) {
        return HttpRejection{400, fmt::format("Content-Length {} is not a decimal number", quoted(first))};
    }
    body_bytes = length;
    return std::nullopt;
}

}  // namespace afd::http
