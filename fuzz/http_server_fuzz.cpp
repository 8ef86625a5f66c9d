// libFuzzer target: the http layer's server (src/http/http_server.h, on cpp-httplib) on the bytes a client sends.
// One server runs for the whole session on loopback, with routes that do what handlers do (a whole reply, a JSON
// body checked, an SSE stream, a throw). Each input goes to a new connection, which then half-closes, and the
// server's whole answer is read until it closes. Beyond "no crash, no sanitizer report", a violation traps:
//   - the answer is a sequence of complete HTTP/1.1 responses (status line, headers, a body framed by
//     Content-Length or chunked, or none for HEAD), each with a status the server may send;
//   - a response of 400 or more has the JSON error body of http_message.h's errorBody with its status as code;
//   - nothing follows a response that says Connection: close;
//   - a connection is accepted within 5 s, and the server closes it within 5 s of the client's half-close;
//   - every 256 inputs, GET /health on a fresh connection still gets "ok".
// cpp-httplib itself is Debian's compiled library, not instrumented: coverage guides the fuzzer through this layer's
// code, and the checks judge what the library and the layer answer together.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/logging.h"
#include "http/http_server.h"

// The fuzz build links no logging backend: the layer's log lines go nowhere.
namespace afd::core {
LogLevel logLevel() { return LogLevel::kOff; }
void logMessage(LogLevel, std::string_view) {}
}  // namespace afd::core

namespace {

using afd::http::HttpReply;
using afd::http::HttpRequest;
using Clock = std::chrono::steady_clock;

constexpr auto kCloseTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);

void require(bool condition) {
    if (!condition) __builtin_trap();
}

afd::http::HttpServer& server() {
    static const std::unique_ptr<afd::http::HttpServer> instance = [] {
        afd::http::HttpServerOptions options;
        options.name = "fuzzed server";
        options.num_threads = 2;
        options.max_header_bytes = 2048;
        options.max_body_bytes = 1024;
        options.read_timeout = std::chrono::milliseconds(1000);
        options.stop_grace = std::chrono::milliseconds(100);
        auto s = std::make_unique<afd::http::HttpServer>(options);
        s->addRoute("GET", "/health", [](const HttpRequest&) { return HttpReply::text(200, "ok\n"); });
        s->addRoute("PUT", "/echo", [](const HttpRequest& request) {
            return HttpReply::text(200, request.method + " " + request.query + " " + request.body);
        });
        s->addRoute("POST", "/json", [](const HttpRequest& request) {
            const nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
            if (body.is_discarded() || !body.is_object()) return HttpReply::error(400, "the body is not a JSON object");
            return HttpReply::json(200, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        });
        s->addRoute("GET", "/events", [](const HttpRequest&) {
            return HttpReply::eventStream([](afd::http::StreamWriter& writer) {
                for (int i = 0; i < 3 && writer.writeEvent("{\"n\":" + std::to_string(i) + "}"); ++i) {
                }
                writer.writeEvent("[DONE]");
            });
        });
        s->addRoute("GET", "/throws", [](const HttpRequest&) -> HttpReply { throw std::runtime_error("thrown"); });
        require(s->start().isOk());
        return s;
    }();
    return *instance;
}

// Waits for a connect in progress on `fd`; returns its errno (0: connected), ETIMEDOUT past `deadline`.
int awaitConnect(int fd, Clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return ETIMEDOUT;
        pollfd entry{fd, POLLOUT, 0};
        if (::poll(&entry, 1, static_cast<int>(left)) <= 0) continue;  // EINTR or the deadline: checked above
        int error = 0;
        socklen_t length = sizeof(error);
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
        return error;
    }
}

// A new connection to the server. Two failures are the client's and not the server's: a connect that a signal
// interrupts (libFuzzer's -timeout alarm, installed without SA_RESTART, hits a connect that waits for a SYN
// retransmit) goes on in the background and is awaited; running out of ephemeral ports (EADDRNOTAVAIL, every port
// in TIME_WAIT) is retried with a new socket. Any other error, or no connection within kConnectTimeout, traps after
// printing errno and the kernel's socket counts: the server no longer accepts.
int connectToServer() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server().port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const Clock::time_point deadline = Clock::now() + kConnectTimeout;
    for (;;) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        require(fd >= 0);
        int error = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 ? 0 : errno;
        if (error == EINTR) error = awaitConnect(fd, deadline);
        if (error == 0) return fd;
        ::close(fd);
        if (error == EADDRNOTAVAIL && Clock::now() < deadline) {
            ::usleep(1000);
            continue;
        }
        std::fprintf(stderr, "connecting to the server failed: %s (errno %d)\n", std::strerror(error), error);
        if (FILE* f = std::fopen("/proc/net/sockstat", "r")) {
            char line[256];
            while (std::fgets(line, sizeof(line), f) != nullptr) std::fputs(line, stderr);
            std::fclose(f);
        }
        require(false);
    }
}

// Sends `bytes` on a new connection, half-closes, and returns everything the server sent until it closed.
std::string exchange(std::string_view bytes) {
    const int fd = connectToServer();
    // Send and read at once: a server that answers early (and stops reading) must not leave the client stuck.
    size_t sent = 0;
    bool half_closed = false;
    std::string reply;
    const Clock::time_point deadline = Clock::now() + kCloseTimeout;
    char buffer[16 * 1024];
    for (;;) {
        if (sent == bytes.size() && !half_closed) {
            ::shutdown(fd, SHUT_WR);
            half_closed = true;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        require(left > 0);  // the server did not close the connection in time
        pollfd entry{fd, static_cast<short>(POLLIN | (half_closed ? 0 : POLLOUT)), 0};
        if (::poll(&entry, 1, static_cast<int>(left)) <= 0) continue;
        if ((entry.revents & POLLOUT) != 0 && !half_closed) {
            const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) sent += static_cast<size_t>(n);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) sent = bytes.size();  // reset
        }
        if ((entry.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
            if (n > 0) {
                reply.append(buffer, static_cast<size_t>(n));
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                break;  // closed (or reset after the server refused unread bytes)
            }
        }
    }
    ::close(fd);
    return reply;
}

bool startsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

std::string lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

// Checks a chunked body starting at `pos`; returns the position after it.
size_t checkChunkedBody(std::string_view reply, size_t pos) {
    for (;;) {
        const size_t line_end = reply.find("\r\n", pos);
        require(line_end != std::string_view::npos);
        const std::string_view size_text = reply.substr(pos, line_end - pos);
        require(!size_text.empty() && size_text.size() <= 8 &&
                size_text.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos);
        const size_t size = std::stoul(std::string(size_text), nullptr, 16);
        pos = line_end + 2;
        if (size == 0) {
            require(reply.substr(pos, 2) == "\r\n");
            return pos + 2;
        }
        require(pos + size + 2 <= reply.size() && reply.substr(pos + size, 2) == "\r\n");
        require(startsWith(reply.substr(pos, size), "data: "));  // the only stream: SSE events, one per chunk
        pos += size + 2;
    }
}

void checkReplies(std::string_view reply) {
    static const std::set<int> kStatuses = {100, 200, 400, 404, 405, 408, 413, 414, 416, 431, 500, 501};
    size_t pos = 0;
    while (pos < reply.size()) {
        const size_t head_end = reply.find("\r\n\r\n", pos);
        require(head_end != std::string_view::npos);
        const std::string_view head = reply.substr(pos, head_end - pos);
        pos = head_end + 4;
        require(startsWith(head, "HTTP/1.1 ") && head.size() >= 13 && head[12] == ' ');
        const std::string_view code = head.substr(9, 3);
        require(std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; }));
        const int status = std::stoi(std::string(code));
        require(kStatuses.count(status) == 1);
        if (status == 100) continue;  // an interim response: the final one follows
        std::string content_length;
        bool chunked = false;
        bool close = false;
        size_t line = head.find("\r\n");
        while (line != std::string_view::npos) {
            const size_t next = head.find("\r\n", line + 2);
            const std::string_view field =
                head.substr(line + 2, next == std::string_view::npos ? head.npos : next - line - 2);
            const size_t colon = field.find(": ");
            require(colon != std::string_view::npos && colon > 0);
            const std::string name = lower(field.substr(0, colon));
            const std::string_view value = field.substr(colon + 2);
            if (name == "content-length") content_length = std::string(value);
            if (name == "transfer-encoding") chunked = value == "chunked";
            if (name == "connection" && value == "close") close = true;
            line = next;
        }
        require(chunked != !content_length.empty());  // exactly one framing
        // A HEAD request's response has the framing headers and no body: the next response starts right away.
        const bool no_body = pos == reply.size() || startsWith(reply.substr(pos), "HTTP/1.1 ");
        if (chunked) {
            if (!no_body) pos = checkChunkedBody(reply, pos);
        } else {
            const size_t length = std::stoul(content_length);
            if (!no_body || length == 0) {
                require(pos + length <= reply.size());
                const std::string_view body = reply.substr(pos, length);
                if (status >= 400) {
                    const nlohmann::json error = nlohmann::json::parse(body, nullptr, false);
                    require(!error.is_discarded() && error.is_object() && error.contains("error"));
                    require(error["error"].value("code", 0) == status);
                    require(error["error"].value("message", std::string()).size() > 0);
                }
                pos += length;
            }
        }
        require(!close || pos == reply.size());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static uint64_t inputs = 0;
    checkReplies(exchange(std::string_view(reinterpret_cast<const char*>(data), size)));
    if (++inputs % 256 == 0) {
        const std::string health = exchange("GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
        require(startsWith(health, "HTTP/1.1 200 OK\r\n") && health.size() >= 3 &&
                health.substr(health.size() - 3) == "ok\n");
    }
    return 0;
}
