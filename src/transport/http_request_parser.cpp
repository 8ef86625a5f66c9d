#include "transport/http_request_parser.h"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace afd::transport {
namespace {

// RFC 9110 token characters (method and header names).
bool isTokenChar(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool isToken(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), isTokenChar); }

std::string_view trimSpaces(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return text;
}

std::string toLower(std::string_view text) {
    std::string out(text);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
        if (key == name) return &value;
    }
    return nullptr;
}

std::optional<HttpRejection> parseRequestHead(std::string_view head, HttpRequest& request, uint64_t& content_length) {
    size_t line_end = head.find("\r\n");
    const std::string_view request_line = head.substr(0, line_end);
    head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);

    const size_t first_space = request_line.find(' ');
    const size_t second_space =
        first_space == std::string_view::npos ? std::string_view::npos : request_line.find(' ', first_space + 1);
    if (second_space == std::string_view::npos || request_line.find(' ', second_space + 1) != std::string_view::npos) {
        return HttpRejection{400, "malformed request line (expected 'METHOD /path HTTP/1.1')"};
    }
    const std::string_view method = request_line.substr(0, first_space);
    const std::string_view target = request_line.substr(first_space + 1, second_space - first_space - 1);
    const std::string_view version = request_line.substr(second_space + 1);
    if (!isToken(method)) return HttpRejection{400, "malformed request method"};
    if (target.empty() || target.front() != '/') return HttpRejection{400, "request target must start with '/'"};
    if (std::any_of(target.begin(), target.end(), [](char c) { return c <= ' ' || c == 0x7f; })) {
        return HttpRejection{400, "request target contains control characters"};
    }
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
        version[5] > '9' || version[7] < '0' || version[7] > '9') {
        return HttpRejection{400, "malformed HTTP version"};
    }
    if (version[5] != '1') return HttpRejection{505, "only HTTP/1.x is supported"};

    request.method = std::string(method);
    const size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    request.query = question == std::string_view::npos ? std::string() : std::string(target.substr(question + 1));

    std::optional<uint64_t> declared_length;
    while (!head.empty()) {
        line_end = head.find("\r\n");
        const std::string_view line = head.substr(0, line_end);
        head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
        if (line.empty() || line.front() == ' ' || line.front() == '\t') {
            return HttpRejection{400, "malformed header line (folded or empty)"};
        }
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos || !isToken(line.substr(0, colon))) {
            return HttpRejection{400, "malformed header line (expected 'Name: value')"};
        }
        const std::string_view value = trimSpaces(line.substr(colon + 1));
        if (std::any_of(value.begin(), value.end(), [](char c) { return c == '\0' || c == '\r' || c == '\n'; })) {
            return HttpRejection{400, "header value contains CR, LF or NUL"};
        }
        std::string name = toLower(line.substr(0, colon));
        if (name == "transfer-encoding") {
            return HttpRejection{501, "Transfer-Encoding is not supported; send Content-Length"};
        }
        if (name == "content-length") {
            uint64_t length = 0;
            const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
            if (ec == std::errc::result_out_of_range) return HttpRejection{413, "Content-Length is too large"};
            if (value.empty() || ec != std::errc() || ptr != value.data() + value.size()) {
                return HttpRejection{400, "Content-Length must be a decimal number"};
            }
            if (declared_length && *declared_length != length) {
                return HttpRejection{400, "conflicting Content-Length headers"};
            }
            declared_length = length;
        }
        request.headers.emplace_back(std::move(name), std::string(value));
    }
    content_length = declared_length.value_or(0);
    return std::nullopt;
}

}  // namespace afd::transport
