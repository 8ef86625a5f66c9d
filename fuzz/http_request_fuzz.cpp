// libFuzzer target: the admin server's request-head parser (parseRequestHead, src/transport/http_request_parser.h)
// on arbitrary bytes, framed as the server frames them: the head is everything before the first blank line
// (CRLF CRLF), or the whole input when there is none. Beyond "no crash, no sanitizer report, no exception", an
// accepted head must hold only what the rules allow, report the Content-Length it carries, and re-serialise to a
// head that parses to the same request. A violation traps.
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "transport/http_request_parser.h"

namespace {

using afd::transport::HttpRejection;
using afd::transport::HttpRequest;

constexpr size_t kMaxHeadBytes = 16 * 1024;  // the server's default max_header_bytes

void require(bool condition) {
    if (!condition) __builtin_trap();
}

bool isTokenChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool isToken(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), isTokenChar); }

bool hasControlOrSpace(std::string_view text) {
    return std::any_of(text.begin(), text.end(),
                       [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; });
}

void checkAccepted(const HttpRequest& request, uint64_t content_length) {
    require(isToken(request.method));
    require(!request.path.empty() && request.path.front() == '/');
    require(request.path.find('?') == std::string::npos);
    require(!hasControlOrSpace(request.path) && !hasControlOrSpace(request.query));
    require(request.body.empty());

    std::string head =
        request.method + " " + request.path + (request.query.empty() ? "" : "?" + request.query) + " HTTP/1.1\r\n";
    bool has_length = false;
    for (const auto& [name, value] : request.headers) {
        require(isToken(name));
        require(std::none_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }));
        require(name != "transfer-encoding");
        require(value.find_first_of(std::string_view("\r\n\0", 3)) == std::string::npos);
        require(value.empty() ||
                (value.front() != ' ' && value.front() != '\t' && value.back() != ' ' && value.back() != '\t'));
        if (name == "content-length") {
            uint64_t length = 0;
            const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
            require(ec == std::errc() && ptr == value.data() + value.size() && length == content_length);
            has_length = true;
        }
        head += name + ": " + value + "\r\n";
    }
    if (!has_length) require(content_length == 0);

    // The canonical form of the request parses to the same request.
    head.resize(head.size() - 2);  // the parser takes the head without its final CRLF
    HttpRequest again;
    uint64_t again_length = 0;
    require(!afd::transport::parseRequestHead(head, again, again_length).has_value());
    require(again.method == request.method && again.path == request.path && again.query == request.query);
    require(again.headers == request.headers && again_length == content_length);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const size_t end = bytes.find("\r\n\r\n");
    if (end != std::string_view::npos && end + 4 > kMaxHeadBytes) return 0;  // the server answers 431 unparsed
    const std::string_view head = bytes.substr(0, end);

    HttpRequest request;
    uint64_t content_length = 0;
    const std::optional<HttpRejection> rejection = afd::transport::parseRequestHead(head, request, content_length);
    if (rejection) {
        require(rejection->status == 400 || rejection->status == 413 || rejection->status == 501 ||
                rejection->status == 505);
        require(!rejection->message.empty());
        return 0;
    }
    checkAccepted(request, content_length);
    return 0;
}
