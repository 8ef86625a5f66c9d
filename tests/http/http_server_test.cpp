#include "http/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "http/http_client.h"
#include "http/http_test_util.h"

namespace afd::http {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::kTestTimeout;
using testing::RawClient;
using testing::statusLine;

// The JSON error object of a reply the server made itself.
nlohmann::json errorOf(const std::string& raw_reply) {
    const size_t body = raw_reply.find("\r\n\r\n");
    if (body == std::string::npos) return nlohmann::json();
    return nlohmann::json::parse(raw_reply.substr(body + 4), nullptr, false).value("error", nlohmann::json());
}

class HttpServerTest : public ::testing::Test {
protected:
    void startServer(HttpServerOptions options = {}) {
        server_ = std::make_unique<HttpServer>(std::move(options));
        server_->addRoute("GET", "/ready", [](const HttpRequest&) { return HttpReply::text(200, "ready\n"); });
        server_->addRoute("POST", "/stop", [this](const HttpRequest& request) {
            stop_requests_.fetch_add(1);
            return HttpReply::json(202, R"({"stopping":true,"got":")" + request.body + "\"}");
        });
        server_->addRoute("GET", "/echo", [](const HttpRequest& request) {
            const std::string* test_header = request.header("x-test");
            return HttpReply::text(200, request.method + " " + request.path + " ?" + request.query +
                                            " x-test=" + (test_header != nullptr ? *test_header : "none") +
                                            " from " + request.remote_address);
        });
        server_->addRoute("PUT", "/echo", [](const HttpRequest& request) {
            HttpReply reply = HttpReply::text(200, std::to_string(request.body.size()));
            reply.headers.emplace_back("X-Reply", "yes");
            reply.headers.emplace_back("Content-Length", "999");  // framing is the server's: dropped
            return reply;
        });
        server_->addRoute("GET", "/throws", [](const HttpRequest&) -> HttpReply { throw std::runtime_error("boom"); });
        server_->addRoute("GET", "/bad-status", [](const HttpRequest&) { return HttpReply::text(42, "?"); });
        const core::Status status = server_->start();
        ASSERT_TRUE(status.isOk()) << status.toString();
        ASSERT_GT(server_->port(), 0);
    }

    core::Result<HttpResponse> request(std::string_view method, std::string_view path, std::string_view body = "") {
        return httpRequest("127.0.0.1", server_->port(), method, path, body, kTestTimeout);
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
    EXPECT_EQ(ready->content_type, "text/plain; charset=utf-8");
    EXPECT_EQ(ready->body, "ready\n");

    auto stop = request("POST", "/stop", "now");
    ASSERT_TRUE(stop.isOk()) << stop.status().toString();
    EXPECT_EQ(stop->status, 202);
    EXPECT_EQ(stop->content_type, "application/json");
    EXPECT_EQ(stop->body, R"({"stopping":true,"got":"now"})");
    EXPECT_EQ(stop_requests_.load(), 1);

    // A POST without Content-Length has an empty body (and is not read to the end of the connection).
    const std::string raw = rawExchange("POST /stop HTTP/1.1\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(statusLine(raw), "HTTP/1.1 202 Accepted");
    EXPECT_THAT(raw, HasSubstr(R"("got":"")"));
}

TEST_F(HttpServerTest, HandlersSeeQueryHeadersAndTheClient) {
    startServer();
    const std::string reply =
        rawExchange("GET /echo?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Test:  hello \r\nConnection: close\r\n\r\n");
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 200 OK");
    EXPECT_THAT(reply, HasSubstr("\r\n\r\nGET /echo ?a=1&b=2 x-test=hello from 127.0.0.1"));
    // Never compressed, whatever the client accepts.
    const std::string accepting = rawExchange("GET /echo HTTP/1.1\r\nAccept-Encoding: gzip, br\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(statusLine(accepting), "HTTP/1.1 200 OK");
    EXPECT_EQ(accepting.find("Content-Encoding"), std::string::npos) << accepting;
    // The path is percent-decoded before routing.
    EXPECT_EQ(statusLine(rawExchange("GET /re%61dy HTTP/1.1\r\nConnection: close\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST_F(HttpServerTest, ReplyHeadersPassButNotFraming) {
    startServer();
    auto reply = request("PUT", "/echo", "abc");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->body, "3");
    ASSERT_NE(reply->header("x-reply"), nullptr);
    EXPECT_EQ(*reply->header("x-reply"), "yes");
    ASSERT_NE(reply->header("content-length"), nullptr);
    EXPECT_EQ(*reply->header("content-length"), "1");
}

TEST_F(HttpServerTest, HeadIsAnsweredByTheGetRouteWithoutABody) {
    startServer();
    const std::string reply = rawExchange("HEAD /ready HTTP/1.1\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 200 OK");
    EXPECT_THAT(reply, HasSubstr("Content-Length: 6\r\n"));
    EXPECT_EQ(reply.substr(reply.find("\r\n\r\n") + 4), "");
}

TEST_F(HttpServerTest, UnknownPathIs404WithAJsonError) {
    startServer();
    auto reply = request("GET", "/nope");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 404);
    EXPECT_EQ(reply->content_type, "application/json");
    const nlohmann::json error = nlohmann::json::parse(reply->body).at("error");
    EXPECT_EQ(error.at("code"), 404);
    EXPECT_EQ(error.at("type"), "invalid_request_error");
    EXPECT_THAT(error.at("message").get<std::string>(), HasSubstr("/nope"));
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
    startServer();
    auto reply = request("POST", "/ready");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 405);
    const std::string raw = rawExchange("DELETE /echo HTTP/1.1\r\n\r\n");
    EXPECT_EQ(statusLine(raw), "HTTP/1.1 405 Method Not Allowed");
    EXPECT_THAT(raw, HasSubstr("Allow: GET, HEAD, PUT\r\n"));
    EXPECT_EQ(errorOf(raw).value("code", 0), 405);
    // Methods no route can have (TRACE) are 405 on a known path too.
    EXPECT_EQ(statusLine(rawExchange("TRACE /ready HTTP/1.1\r\n\r\n")), "HTTP/1.1 405 Method Not Allowed");
}

// What cpp-httplib refuses (its request-line rules), and what the server refuses from the headers before reading a
// body. Every refusal closes the connection.
TEST_F(HttpServerTest, MalformedRequestsAre400AndCloseTheConnection) {
    startServer();
    const std::vector<std::string> malformed = {
        "GARBAGE\r\n\r\n",
        "GET /ready\r\n\r\n",
        "GET /ready HTTX/1.1\r\n\r\n",
        "GET /ready HTTP/2.0\r\n\r\n",
        "G(T /ready HTTP/1.1\r\n\r\n",
        "FOO /ready HTTP/1.1\r\n\r\n",
        "GET /ready HTTP/1.1\r\nAccept-Encoding: gzip\r\nX-Long: " + std::string(9 * 1024, 'a') + "\r\n\r\n",  // > 8 KiB
        "POST /stop HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
        "POST /stop HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST /stop HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    };
    for (const std::string& bytes : malformed) {
        RawClient client(server_->port());
        ASSERT_TRUE(client.send(bytes + "GET /ready HTTP/1.1\r\n\r\n"));  // never read as a second request
        bool closed = false;
        const std::string reply = client.readToEnd(&closed);
        EXPECT_EQ(statusLine(reply), "HTTP/1.1 400 Bad Request") << bytes.substr(0, 60);
        EXPECT_TRUE(closed);
        EXPECT_THAT(reply, HasSubstr("Connection: close\r\n"));
        EXPECT_EQ(errorOf(reply).value("code", 0), 400) << reply;
        EXPECT_EQ(reply.find("Content-Encoding"), std::string::npos) << reply;
        EXPECT_EQ(reply.find("HTTP/1.1 200"), std::string::npos) << bytes.substr(0, 60);
    }
    EXPECT_EQ(statusLine(rawExchange("GET /" + std::string(9 * 1024, 'a') + " HTTP/1.1\r\n\r\n")),
              "HTTP/1.1 414 URI Too Long");
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
    const std::string reply = rawExchange(big_header);
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 431 Request Header Fields Too Large");
    EXPECT_EQ(errorOf(reply).value("code", 0), 431);
    // Many short headers count together; no blank line at all is refused too once the limit is reached.
    std::string many = "GET /ready HTTP/1.1\r\n";
    for (int i = 0; i < 800; ++i) many += "X-H" + std::to_string(i) + ": aaaaaaaaaaaaaaaa\r\n";
    EXPECT_EQ(statusLine(rawExchange(many + "\r\n")), "HTTP/1.1 431 Request Header Fields Too Large");
    EXPECT_EQ(statusLine(rawExchange(many)), "HTTP/1.1 431 Request Header Fields Too Large");
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
              "HTTP/1.1 413 Payload Too Large");
    // With Expect: 100-continue the refusal comes instead of the 100.
    EXPECT_EQ(statusLine(rawExchange("PUT /echo HTTP/1.1\r\nContent-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")),
              "HTTP/1.1 413 Payload Too Large");
}

TEST_F(HttpServerTest, IncompleteRequestGets408AfterTheReadDeadline) {
    HttpServerOptions options;
    options.read_timeout = 200ms;
    startServer(options);
    RawClient client(server_->port());
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(client.send("POST /stop HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
    bool closed = false;
    const auto start = std::chrono::steady_clock::now();
    const std::string reply = client.readToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 408 Request Timeout");
    EXPECT_EQ(stop_requests_.load(), 0);
    // A connection that never sends anything is closed without a reply.
    RawClient silent(server_->port());
    EXPECT_EQ(silent.readToEnd(&closed), "");
    EXPECT_TRUE(closed);
}

TEST_F(HttpServerTest, HandlerExceptionsAndInvalidStatusesAre500) {
    startServer();
    for (const char* path : {"/throws", "/bad-status"}) {
        auto reply = request("GET", path);
        ASSERT_TRUE(reply.isOk()) << reply.status().toString();
        EXPECT_EQ(reply->status, 500) << path;
        EXPECT_EQ(nlohmann::json::parse(reply->body).at("error").at("type"), "server_error");
    }
}

TEST_F(HttpServerTest, KeepAliveServesPipelinedRequestsInOrder) {
    startServer();
    RawClient client(server_->port());
    ASSERT_TRUE(client.send("GET /ready HTTP/1.1\r\n\r\nPUT /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd"
                            "GET /echo?last HTTP/1.1\r\nConnection: close\r\n\r\n"));
    bool closed = false;
    const std::string replies = client.readToEnd(&closed);
    EXPECT_TRUE(closed);
    const size_t first = replies.find("ready\n");
    const size_t second = replies.find("\r\n\r\n4");
    const size_t third = replies.find("GET /echo ?last");
    ASSERT_NE(first, std::string::npos) << replies;
    ASSERT_NE(second, std::string::npos) << replies;
    ASSERT_NE(third, std::string::npos) << replies;
    EXPECT_LT(first, second);
    EXPECT_LT(second, third);
}

TEST_F(HttpServerTest, GetBodyIsNeverReadAsTheNextRequest) {
    startServer();
    RawClient client(server_->port());
    ASSERT_TRUE(client.send("GET /ready HTTP/1.1\r\nContent-Length: 24\r\n\r\nPOST /stop HTTP/1.1\r\n\r\n"));
    bool closed = false;
    const std::string replies = client.readToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(statusLine(replies), "HTTP/1.1 200 OK");
    EXPECT_EQ(stop_requests_.load(), 0);
}

TEST_F(HttpServerTest, SixtyFourConcurrentClientsAllGetTheirReplies) {
    HttpServerOptions options;
    options.num_threads = 8;
    options.max_queued_connections = 128;
    startServer(options);
    constexpr int kClients = 64;
    constexpr int kRequestsEach = 5;
    // A client that sent half a request holds a thread but not the others.
    RawClient stalled(server_->port());
    ASSERT_TRUE(stalled.send("GET /ready HTTP/1.1\r\n"));

    std::vector<std::future<int>> results;
    for (int i = 0; i < kClients; ++i) {
        results.push_back(std::async(std::launch::async, [this, i] {
            HttpClientOptions client_options;
            client_options.timeout = kTestTimeout;
            client_options.keep_alive = i % 2 == 0;  // half reuse their connection
            HttpClient client("127.0.0.1", server_->port(), client_options);
            int ok = 0;
            for (int j = 0; j < kRequestsEach; ++j) {
                const std::string body = fmt::format("{}-{}", i, j);
                auto reply = client.post("/stop", body);
                if (reply.isOk() && reply->status == 202 &&
                    reply->body == R"({"stopping":true,"got":")" + body + "\"}") {
                    ++ok;
                }
            }
            return ok;
        }));
    }
    for (auto& result : results) {
        ASSERT_EQ(result.wait_for(2 * kTestTimeout), std::future_status::ready);
        EXPECT_EQ(result.get(), kRequestsEach);
    }
    EXPECT_EQ(stop_requests_.load(), kClients * kRequestsEach);
}

TEST(HttpServer, ConnectionsBeyondThreadsAndQueueAre503) {
    HttpServerOptions options;
    options.num_threads = 1;
    options.max_queued_connections = 1;
    HttpServer server(options);
    server.addRoute("GET", "/ready", [](const HttpRequest&) { return HttpReply::text(200, "ready\n"); });
    ASSERT_TRUE(server.start().isOk());
    // The first holds the only thread (a keep-alive connection), the second waits in the queue.
    RawClient holder(server.port());
    std::string data;
    ASSERT_TRUE(holder.send("GET /ready HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(holder.readUntil("ready\n", data));
    RawClient queued(server.port());
    ASSERT_TRUE(queued.connected());
    std::this_thread::sleep_for(100ms);  // the acceptor queues it
    RawClient refused(server.port());
    bool closed = false;
    const std::string reply = refused.readToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 503 Service Unavailable");
    // Once the holder leaves, the queued one is served.
    holder.close();
    ASSERT_TRUE(queued.send("GET /ready HTTP/1.1\r\nConnection: close\r\n\r\n"));
    EXPECT_EQ(statusLine(queued.readToEnd()), "HTTP/1.1 200 OK");
}

TEST_F(HttpServerTest, StopWithClientsConnectedReturnsWithinTheBoundAndReleasesThem) {
    HttpServerOptions options;
    options.stop_grace = 500ms;
    options.keep_alive_timeout = 30s;
    options.read_timeout = 30s;
    startServer(options);
    RawClient partial(server_->port());
    ASSERT_TRUE(partial.send("GET /ready HTTP/1.1\r\nX-Partial: 1\r\n"));
    RawClient idle(server_->port());  // a keep-alive connection between two requests
    std::string data;
    ASSERT_TRUE(idle.send("GET /ready HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(idle.readUntil("ready\n", data));
    RawClient connected_only(server_->port());
    std::this_thread::sleep_for(50ms);

    const auto start = std::chrono::steady_clock::now();
    auto stopped = std::async(std::launch::async, [this] { server_->stop(); });
    ASSERT_EQ(stopped.wait_for(kTestTimeout), std::future_status::ready);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    for (RawClient* client : {&partial, &idle, &connected_only}) {
        bool closed = false;
        EXPECT_EQ(client->readToEnd(&closed, 2s), "");
        EXPECT_TRUE(closed);
    }
    // Nobody listens any more; stop() again is harmless.
    EXPECT_FALSE(request("GET", "/ready").isOk());
    server_->stop();
}

TEST(HttpServer, BindFirstServeLater) {
    HttpServer server;
    ASSERT_TRUE(server.bind().isOk());
    const int port = server.port();
    ASSERT_GT(port, 0);
    server.addRoute("GET", "/ready", [](const HttpRequest&) { return HttpReply::text(200, "ready\n"); });
    // A client that comes before start() waits in the backlog and is answered once serving starts.
    auto early = std::async(std::launch::async, [port] {
        return httpRequest("127.0.0.1", port, "GET", "/ready", "", kTestTimeout);
    });
    EXPECT_EQ(early.wait_for(200ms), std::future_status::timeout);
    ASSERT_TRUE(server.start().isOk());
    ASSERT_EQ(early.wait_for(kTestTimeout), std::future_status::ready);
    auto reply = early.get();
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->body, "ready\n");
}

TEST(HttpServer, SecondServerOnABusyPortFailsAtBindNamingTheAddress) {
    HttpServer first;
    ASSERT_TRUE(first.start().isOk());
    HttpServerOptions options;
    options.name = "second server";
    options.port = first.port();
    HttpServer second(options);
    const core::Status status = second.bind();
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), core::StatusCode::kIoError);
    EXPECT_THAT(status.message(), HasSubstr(fmt::format("second server: cannot listen on 127.0.0.1:{}", first.port())));
    EXPECT_THAT(status.message(), HasSubstr("in use"));
    // A port held by a server that only bound (not serving yet) is taken too.
    HttpServer bound_only;
    ASSERT_TRUE(bound_only.bind().isOk());
    options.port = bound_only.port();
    HttpServer third(options);
    EXPECT_EQ(third.start().code(), core::StatusCode::kIoError);
}

TEST(HttpServer, UnresolvableHostAndBadOptionsFail) {
    HttpServerOptions options;
    options.host = "no-such-host.invalid";
    HttpServer server(options);
    const core::Status status = server.bind();
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), core::StatusCode::kNotFound);
    EXPECT_THAT(status.message(), HasSubstr("no-such-host.invalid"));

    HttpServerOptions bad;
    bad.num_threads = 0;
    EXPECT_EQ(HttpServer(bad).start().code(), core::StatusCode::kInvalidArgument);
    bad = HttpServerOptions{};
    bad.port = 70000;
    EXPECT_EQ(bad.validate().code(), core::StatusCode::kInvalidArgument);
}

TEST(HttpServer, StopWithoutStartAndDestructionAreHarmless) {
    HttpServer never_started;
    never_started.stop();
    HttpServer bound;
    ASSERT_TRUE(bound.bind().isOk());
    bound.stop();
    HttpServer started;
    ASSERT_TRUE(started.start().isOk());
}

TEST(HttpServer, MisuseIsABug) {
    HttpServer server;
    server.addRoute("GET", "/a", [](const HttpRequest&) { return HttpReply{}; });
    EXPECT_THROW(server.addRoute("GET", "/a", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
    EXPECT_THROW(server.addRoute("TRACE", "/b", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
    EXPECT_THROW(server.addRoute("GET", "b", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
    ASSERT_TRUE(server.start().isOk());
    EXPECT_THROW(server.addRoute("GET", "/b", [](const HttpRequest&) { return HttpReply{}; }), core::Error);
    EXPECT_THROW((void)server.start(), core::Error);
}

TEST(HttpServer, StopFromItsOwnHandlerIsABugAnsweredWith500) {
    HttpServer server;
    server.addRoute("POST", "/stop", [&server](const HttpRequest&) {
        server.stop();
        return HttpReply::text(200, "stopped?\n");
    });
    ASSERT_TRUE(server.start().isOk());
    auto reply = httpRequest("127.0.0.1", server.port(), "POST", "/stop", "", kTestTimeout);
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 500);
}

}  // namespace
}  // namespace afd::http
