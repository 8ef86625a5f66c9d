#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/unique_fd.h"
#include "transport/http_client.h"
#include "transport/http_server.h"

namespace afd::transport {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;  // hard bound on every wait in these tests

// A plain TCP client for sending exact bytes (malformed or partial requests).
class RawClient {
public:
    explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<uint16_t>(port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    }
    bool connected() const { return connected_; }

    // Sends everything it can; false when the peer closed the connection.
    bool send(const std::string& bytes) {
        size_t sent = 0;
        while (sent < bytes.size()) {
            const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) return false;
            sent += static_cast<size_t>(n);
        }
        return true;
    }

    // Reads until the server closes the connection; `closed` is false if kTimeout passed first.
    std::string readToEnd(bool* closed = nullptr) {
        std::string data;
        const auto deadline = std::chrono::steady_clock::now() + kTimeout;
        char buffer[4096];
        for (;;) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd entry{fd_.get(), POLLIN, 0};
            if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) <= 0) break;
            const ssize_t n = ::recv(fd_.get(), buffer, sizeof(buffer), 0);
            if (n <= 0) {
                if (closed != nullptr) *closed = true;
                return data;
            }
            data.append(buffer, static_cast<size_t>(n));
        }
        if (closed != nullptr) *closed = false;
        return data;
    }

private:
    core::UniqueFd fd_;
    bool connected_ = false;
};

// The status line of a raw reply, e.g. "HTTP/1.1 404 Not Found".
std::string statusLine(const std::string& reply) { return reply.substr(0, reply.find("\r\n")); }

class HttpServerTest : public ::testing::Test {
protected:
    void startServer(HttpServerOptions options = {}) {
        server_ = std::make_unique<HttpServer>(std::move(options));
        server_->addRoute("GET", "/ready", [](const HttpRequest&) { return HttpReply{200, "text/plain", "ready\n"}; });
        server_->addRoute("POST", "/stop", [this](const HttpRequest& request) {
            stop_requests_.fetch_add(1);
            return HttpReply{202, "application/json", R"({"stopping":true,"got":")" + request.body + "\"}"};
        });
        server_->addRoute("GET", "/echo", [](const HttpRequest& request) {
            const std::string* agent = request.header("x-test");
            return HttpReply{200, "text/plain",
                             request.method + " " + request.path + " ?" + request.query +
                                 " x-test=" + (agent != nullptr ? *agent : "none")};
        });
        server_->addRoute("PUT", "/echo", [](const HttpRequest& request) {
            return HttpReply{200, "application/octet-stream", std::to_string(request.body.size())};
        });
        server_->addRoute("GET", "/throws", [](const HttpRequest&) -> HttpReply { throw std::runtime_error("boom"); });
        const core::Status status = server_->start();
        ASSERT_TRUE(status.isOk()) << status.toString();
        ASSERT_GT(server_->port(), 0);
    }

    core::Result<HttpResponse> request(std::string_view method, std::string_view path, std::string_view body = "") {
        return httpRequest("127.0.0.1", server_->port(), method, path, body, kTimeout);
    }

    std::string rawExchange(const std::string& bytes) {
        RawClient client(server_->port());
        EXPECT_TRUE(client.connected());
        client.send(bytes);
        return client.readToEnd();
    }

    std::unique_ptr<HttpServer> server_;
    std::atomic<int> stop_requests_{0};
};

TEST_F(HttpServerTest, RoutesReachTheirHandlers) {
    startServer();
    auto ready = request("GET", "/ready");
    ASSERT_TRUE(ready.isOk()) << ready.status().toString();
    EXPECT_EQ(ready->status, 200);
    EXPECT_EQ(ready->content_type, "text/plain");
    EXPECT_EQ(ready->body, "ready\n");

    auto stop = request("POST", "/stop", "now");
    ASSERT_TRUE(stop.isOk()) << stop.status().toString();
    EXPECT_EQ(stop->status, 202);
    EXPECT_EQ(stop->content_type, "application/json");
    EXPECT_EQ(stop->body, R"({"stopping":true,"got":"now"})");
    EXPECT_EQ(stop_requests_.load(), 1);
}

TEST_F(HttpServerTest, HandlersSeeQueryAndHeaders) {
    startServer();
    const std::string reply = rawExchange("GET /echo?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Test:  hello \r\n\r\n");
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 200 OK");
    EXPECT_THAT(reply, HasSubstr("Connection: close\r\n"));
    EXPECT_THAT(reply, HasSubstr("Content-Length: 31\r\n"));
    EXPECT_THAT(reply, HasSubstr("\r\n\r\nGET /echo ?a=1&b=2 x-test=hello"));
}

TEST_F(HttpServerTest, UnknownPathIs404) {
    startServer();
    auto reply = request("GET", "/nope");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 404);
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
    startServer();
    auto reply = request("POST", "/ready");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 405);
    const std::string raw = rawExchange("DELETE /echo HTTP/1.1\r\n\r\n");
    EXPECT_EQ(statusLine(raw), "HTTP/1.1 405 Method Not Allowed");
    EXPECT_THAT(raw, HasSubstr("Allow: GET, PUT\r\n"));
}

TEST_F(HttpServerTest, MalformedRequestsAre400) {
    startServer();
    const std::vector<std::string> malformed = {
        "GARBAGE\r\n\r\n",
        "GET /ready\r\n\r\n",
        "GET  /ready HTTP/1.1\r\n\r\n",
        "GET ready HTTP/1.1\r\n\r\n",
        "GET /ready HTTX/1.1\r\n\r\n",
        "G(T /ready HTTP/1.1\r\n\r\n",
        "GET /ready HTTP/1.1\r\nNoColonHere\r\n\r\n",
        "GET /ready HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "GET /ready HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
        "POST /stop HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
        "POST /stop HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST /stop HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    };
    for (const std::string& bytes : malformed) {
        EXPECT_EQ(statusLine(rawExchange(bytes)), "HTTP/1.1 400 Bad Request") << bytes;
    }
    EXPECT_EQ(statusLine(rawExchange("GET /ready HTTP/2.0\r\n\r\n")), "HTTP/1.1 505 HTTP Version Not Supported");
    EXPECT_EQ(statusLine(rawExchange("POST /stop HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")),
              "HTTP/1.1 501 Not Implemented");
    EXPECT_EQ(stop_requests_.load(), 0);
    // The server still serves after all of that.
    auto ready = request("GET", "/ready");
    ASSERT_TRUE(ready.isOk()) << ready.status().toString();
    EXPECT_EQ(ready->status, 200);
}

TEST_F(HttpServerTest, OversizeHeadIs431) {
    startServer();
    const std::string big_header = "GET /ready HTTP/1.1\r\nX-Big: " + std::string(17 * 1024, 'a') + "\r\n\r\n";
    EXPECT_EQ(statusLine(rawExchange(big_header)), "HTTP/1.1 431 Request Header Fields Too Large");
    // No blank line at all: rejected once 16 KiB have arrived, without waiting for the deadline.
    const std::string endless = "GET /ready HTTP/1.1\r\nX-Big: " + std::string(20 * 1024, 'a');
    EXPECT_EQ(statusLine(rawExchange(endless)), "HTTP/1.1 431 Request Header Fields Too Large");
}

TEST_F(HttpServerTest, OversizeBodyIs413AndTheLimitItselfIsAccepted) {
    startServer();
    const size_t limit = HttpServerOptions{}.max_body_bytes;
    auto at_limit = request("PUT", "/echo", std::string(limit, 'x'));
    ASSERT_TRUE(at_limit.isOk()) << at_limit.status().toString();
    EXPECT_EQ(at_limit->status, 200);
    EXPECT_EQ(at_limit->body, std::to_string(limit));

    // Declared too large: refused before the body is read; the reply still reaches the client.
    auto over = request("PUT", "/echo", std::string(limit + 1, 'x'));
    ASSERT_TRUE(over.isOk()) << over.status().toString();
    EXPECT_EQ(over->status, 413);
    EXPECT_EQ(statusLine(rawExchange("PUT /echo HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")),
              "HTTP/1.1 413 Content Too Large");
}

TEST_F(HttpServerTest, IncompleteRequestGets408AfterTheReadDeadline) {
    HttpServerOptions options;
    options.read_timeout = 200ms;
    startServer(options);
    RawClient client(server_->port());
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(client.send("POST /stop HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
    bool closed = false;
    const std::string reply = client.readToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 408 Request Timeout");
    EXPECT_EQ(stop_requests_.load(), 0);
}

TEST_F(HttpServerTest, HandlerExceptionIs500) {
    startServer();
    auto reply = request("GET", "/throws");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 500);
}

TEST_F(HttpServerTest, ConcurrentClientsAllGetTheirReplies) {
    startServer();
    constexpr int kClients = 16;
    constexpr int kRequestsEach = 10;
    // A client that sent half a request must not hold up the others.
    RawClient stalled(server_->port());
    ASSERT_TRUE(stalled.connected());
    ASSERT_TRUE(stalled.send("GET /ready HTTP/1.1\r\n"));

    std::vector<std::future<int>> results;
    for (int i = 0; i < kClients; ++i) {
        results.push_back(std::async(std::launch::async, [this, i] {
            int ok = 0;
            for (int j = 0; j < kRequestsEach; ++j) {
                const std::string body = fmt::format("{}-{}", i, j);
                auto reply = request("POST", "/stop", body);
                if (reply.isOk() && reply->status == 202 &&
                    reply->body == R"({"stopping":true,"got":")" + body + "\"}") {
                    ++ok;
                }
            }
            return ok;
        }));
    }
    for (auto& result : results) {
        ASSERT_EQ(result.wait_for(kTimeout), std::future_status::ready);
        EXPECT_EQ(result.get(), kRequestsEach);
    }
    EXPECT_EQ(stop_requests_.load(), kClients * kRequestsEach);
}

TEST_F(HttpServerTest, StopWhileAClientIsConnectedReturnsAndReleasesTheClient) {
    startServer();
    RawClient idle(server_->port());
    ASSERT_TRUE(idle.connected());
    ASSERT_TRUE(idle.send("GET /ready HTTP/1.1\r\nX-Partial: 1\r\n"));
    // Clients are accepted in order, so once this one is served the idle one is held by the server.
    auto ready = request("GET", "/ready");
    ASSERT_TRUE(ready.isOk()) << ready.status().toString();

    auto stopped = std::async(std::launch::async, [this] { server_->stop(); });
    ASSERT_EQ(stopped.wait_for(kTimeout), std::future_status::ready);
    bool closed = false;
    EXPECT_EQ(idle.readToEnd(&closed), "");
    EXPECT_TRUE(closed);
    // Nobody listens any more; stop() again is harmless.
    EXPECT_FALSE(request("GET", "/ready").isOk());
    server_->stop();
}

TEST(HttpServer, SecondServerOnABusyPortFailsNamingTheAddress) {
    HttpServer first;
    ASSERT_TRUE(first.start().isOk());
    HttpServerOptions options;
    options.port = first.port();
    HttpServer second(options);
    const core::Status status = second.start();
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), core::StatusCode::kIoError);
    EXPECT_THAT(status.message(), HasSubstr(fmt::format("127.0.0.1:{}", first.port())));
}

TEST(HttpServer, UnresolvableHostFails) {
    HttpServerOptions options;
    options.host = "no-such-host.invalid";
    HttpServer server(options);
    const core::Status status = server.start();
    ASSERT_FALSE(status.isOk());
    EXPECT_THAT(status.message(), HasSubstr("no-such-host.invalid"));
}

TEST(HttpServer, StopWithoutStartAndDestructionAreHarmless) {
    HttpServer never_started;
    never_started.stop();
    HttpServer started;
    ASSERT_TRUE(started.start().isOk());
}

TEST(HttpServer, RoutesAfterStartAreABug) {
    HttpServer server;
    server.addRoute("GET", "/a", [](const HttpRequest&) { return HttpReply{}; });
    EXPECT_THROW(server.addRoute("GET", "/a", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
    ASSERT_TRUE(server.start().isOk());
    EXPECT_THROW(server.addRoute("GET", "/b", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
}

// A socket bound to a loopback port without listening: connections to it are refused.
TEST(HttpClient, RefusedConnectionIsAnIoErrorNamingTheAddress) {
    core::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    const int port = ntohs(address.sin_port);

    auto reply = httpRequest("127.0.0.1", port, "GET", "/ready", "", kTimeout);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kIoError);
    EXPECT_THAT(reply.status().message(), HasSubstr(fmt::format("127.0.0.1:{}/ready", port)));
}

// A listening socket that never answers: the exchange ends at the timeout.
TEST(HttpClient, SilentServerIsATimeout) {
    core::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(fd.get(), 4), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);

    auto reply = httpRequest("127.0.0.1", ntohs(address.sin_port), "GET", "/ready", "", 200ms);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kTimeout);
}

TEST(HttpClient, RejectsRequestLinesItCannotSend) {
    auto reply = httpRequest("127.0.0.1", 1, "GET", "/a b", "", 1s);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_FALSE(httpRequest("127.0.0.1", 1, "GET", "relative", "", 1s).isOk());
}

}  // namespace
}  // namespace afd::transport
