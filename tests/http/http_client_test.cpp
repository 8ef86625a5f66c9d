#include "http/http_client.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "core/unique_fd.h"
#include "http/http_server.h"
#include "http/http_test_util.h"

namespace afd::http {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::kTestTimeout;

// A loopback socket that listens; what happens to its clients is up to the test.
struct Listener {
    Listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
        EXPECT_EQ(::listen(fd.get(), 4), 0);
        socklen_t length = sizeof(address);
        EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
        port = ntohs(address.sin_port);
    }
    core::UniqueFd fd;
    int port = 0;
};

TEST(HttpClient, RefusedConnectionIsAnIoErrorNamingTheAddress) {
    testing::UnlistenedPort unlistened;
    ASSERT_GT(unlistened.port(), 0);
    auto reply = httpRequest("127.0.0.1", unlistened.port(), "GET", "/ready", "", kTestTimeout);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kIoError);
    EXPECT_THAT(reply.status().message(), HasSubstr(fmt::format("HTTP GET 127.0.0.1:{}/ready", unlistened.port())));
}

TEST(HttpClient, SilentServerIsATimeout) {
    Listener silent;  // accepts (in the kernel) and never answers
    const auto start = std::chrono::steady_clock::now();
    auto reply = httpRequest("127.0.0.1", silent.port, "GET", "/ready", "", 200ms);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kTimeout) << reply.status().toString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(HttpClient, ConnectionClosedBeforeAReplyIsPeerLost) {
    Listener listener;
    std::thread closer([&] {
        const int client = ::accept(listener.fd.get(), nullptr, nullptr);
        char buffer[256];
        (void)::recv(client, buffer, sizeof(buffer), 0);
        const std::string partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part";
        (void)::send(client, partial.data(), partial.size(), MSG_NOSIGNAL);
        ::close(client);
    });
    auto reply = httpRequest("127.0.0.1", listener.port, "GET", "/ready", "", kTestTimeout);
    closer.join();
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kPeerLost) << reply.status().toString();
}

TEST(HttpClient, UnresolvableHostIsNotFound) {
    auto reply = httpRequest("no-such-host.invalid", 80, "GET", "/ready", "", 2s);
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kNotFound) << reply.status().toString();
}

TEST(HttpClient, RejectsRequestLinesItCannotSend) {
    for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
             {"GET", "/a b"}, {"GET", "relative"}, {"GET", ""}, {"", "/a"}, {"GE T", "/a"}, {"GET", "/a\r\nX: y"}}) {
        auto reply = httpRequest("127.0.0.1", 1, method, path, "", 1s);
        ASSERT_FALSE(reply.isOk());
        EXPECT_EQ(reply.status().code(), core::StatusCode::kInvalidArgument) << method << " " << path;
    }
}

class HttpClientServerTest : public ::testing::Test {
protected:
    void SetUp() override {
        server_.addRoute("GET", "/port", [](const HttpRequest& request) {
            return HttpReply::text(200, std::to_string(request.remote_port));
        });
        server_.addRoute("GET", "/big", [](const HttpRequest&) { return HttpReply::text(200, std::string(2 << 20, 'b')); });
        server_.addRoute("GET", "/hold", [this](const HttpRequest&) {
            (void)release_.get_future().wait_for(kTestTimeout);
            return HttpReply::text(200, "released\n");
        });
        server_.addRoute("POST", "/length", [](const HttpRequest& request) {
            const std::string* type = request.header("content-type");
            return HttpReply::text(200, fmt::format("{} {}", request.body.size(), type != nullptr ? *type : "-"));
        });
        ASSERT_TRUE(server_.start().isOk());
    }

    HttpServer server_;
    std::promise<void> release_;
};

TEST_F(HttpClientServerTest, KeepAliveReusesTheConnection) {
    HttpClientOptions options;
    options.keep_alive = true;
    HttpClient reusing("127.0.0.1", server_.port(), options);
    auto first = reusing.get("/port");
    auto second = reusing.get("/port");
    ASSERT_TRUE(first.isOk() && second.isOk());
    EXPECT_EQ(first->body, second->body);

    HttpClient fresh("127.0.0.1", server_.port());
    auto third = fresh.get("/port");
    auto fourth = fresh.get("/port");
    ASSERT_TRUE(third.isOk() && fourth.isOk());
    EXPECT_NE(third->body, fourth->body);
}

TEST_F(HttpClientServerTest, PostSendsItsBodyAndContentType) {
    HttpClient client("127.0.0.1", server_.port());
    auto reply = client.post("/length", "{\"a\":1}");
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->body, "7 application/json");
    auto empty = client.post("/length", "", "text/plain");
    ASSERT_TRUE(empty.isOk()) << empty.status().toString();
    EXPECT_EQ(empty->body, "0 text/plain");
}

TEST_F(HttpClientServerTest, OversizeReplyIsCorrupt) {
    HttpClientOptions options;
    options.max_body_bytes = 1 << 20;
    HttpClient client("127.0.0.1", server_.port(), options);
    auto reply = client.get("/big");
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kCorrupt);
    // Streamed bodies are not limited.
    size_t streamed = 0;
    auto stream = client.stream("GET", "/big", "", [&](std::string_view piece) {
        streamed += piece.size();
        return true;
    });
    ASSERT_TRUE(stream.isOk()) << stream.status().toString();
    EXPECT_EQ(streamed, size_t{2} << 20);
}

TEST_F(HttpClientServerTest, AbortEndsACallInFlight) {
    HttpClient client("127.0.0.1", server_.port());
    auto call = std::async(std::launch::async, [&] { return client.get("/hold"); });
    std::this_thread::sleep_for(100ms);
    const auto start = std::chrono::steady_clock::now();
    client.abort();
    ASSERT_EQ(call.wait_for(kTestTimeout), std::future_status::ready);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_EQ(call.get().status().code(), core::StatusCode::kCancelled);
    release_.set_value();
    client.abort();  // no call in flight: nothing happens
    auto next = client.get("/port");
    EXPECT_TRUE(next.isOk()) << next.status().toString();
}

// A server that closes while the client still sends must not raise SIGPIPE in the client's process, whose default
// action would end it (cpp-httplib's client sends without MSG_NOSIGNAL).
TEST(HttpClient, AServerClosingMidRequestRaisesNoSigpipe) {
    struct sigaction previous {};
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ASSERT_EQ(::sigaction(SIGPIPE, &default_action, &previous), 0);
    Listener listener;
    std::thread closer([&] {
        const int client = ::accept(listener.fd.get(), nullptr, nullptr);
        char buffer[1024];
        (void)::recv(client, buffer, sizeof(buffer), 0);
        ::close(client);  // unread bytes: the kernel resets the connection
    });
    auto reply = httpRequest("127.0.0.1", listener.port, "POST", "/upload", std::string(32 << 20, 'x'), kTestTimeout);
    closer.join();
    EXPECT_FALSE(reply.isOk());
    ::sigaction(SIGPIPE, &previous, nullptr);
}

}  // namespace
}  // namespace afd::http
