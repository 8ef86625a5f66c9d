// Streaming replies (SSE) end to end: a live server on loopback, the layer's client, and raw sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/http_client.h"
#include "http/http_server.h"
#include "http/http_test_util.h"

namespace afd::http {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::kTestTimeout;
using testing::RawClient;

// What a test's producer saw, shared with the test body.
struct ProducerLog {
    std::mutex mutex;
    std::condition_variable cv;
    int events_received = 0;  // by the client
    bool finished = false;    // the producer returned
    bool timed_out = false;   // the producer gave up waiting for the client
    std::optional<Clock::time_point> noticed_disconnect;
    bool saw_stopping = false;

    void received() {
        {
            std::lock_guard lock(mutex);
            ++events_received;
        }
        cv.notify_all();
    }
    void finish() {
        {
            std::lock_guard lock(mutex);
            finished = true;
        }
        cv.notify_all();
    }
    bool waitFinished(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex);
        return cv.wait_for(lock, timeout, [this] { return finished; });
    }
};

// Waits while the client is there, checking as a producer that waits for data would; false after kTestTimeout.
bool waitForDisconnect(StreamWriter& writer) {
    const auto deadline = Clock::now() + kTestTimeout;
    while (writer.connected()) {
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(10ms);
    }
    return true;
}

class HttpStreamTest : public ::testing::Test {
protected:
    void SetUp() override {
        HttpServerOptions options;
        options.stop_grace = 500ms;
        server_ = std::make_unique<HttpServer>(options);
        // Writes kEvents events, each only after the client has received the one before: they cannot be buffered.
        server_->addRoute("POST", "/events", [this](const HttpRequest& request) {
            const std::string prompt = request.body;
            return HttpReply::eventStream([this, prompt](StreamWriter& writer) {
                for (int i = 0; i < kEvents; ++i) {
                    if (!writer.writeEvent(fmt::format("{} {}", prompt, i))) break;
                    std::unique_lock lock(log_.mutex);
                    if (!log_.cv.wait_for(lock, kTestTimeout, [&] { return log_.events_received > i; })) {
                        log_.timed_out = true;
                        break;
                    }
                }
                writer.writeEvent("[DONE]");
                log_.finish();
            });
        });
        // One event, then waits for the client to leave (or the server to stop).
        server_->addRoute("GET", "/hold", [this](const HttpRequest&) {
            return HttpReply::eventStream([this](StreamWriter& writer) {
                writer.writeEvent("first");
                const bool left = waitForDisconnect(writer);
                {
                    std::lock_guard lock(log_.mutex);
                    if (left) log_.noticed_disconnect = Clock::now();
                    log_.saw_stopping = writer.stopping();
                }
                if (writer.stopping()) writer.writeEvent("bye");
                log_.finish();
            });
        });
        server_->addRoute("GET", "/throws", [](const HttpRequest&) {
            return HttpReply::eventStream([](StreamWriter& writer) {
                writer.writeEvent("before");
                throw std::runtime_error("the producer failed");
            });
        });
        // Ignores connected(): writes until a write fails.
        server_->addRoute("GET", "/stubborn", [this](const HttpRequest&) {
            return HttpReply::eventStream([this](StreamWriter& writer) {
                while (writer.writeComment("still here")) std::this_thread::sleep_for(10ms);
                log_.finish();
            });
        });
        server_->addRoute("POST", "/refused", [](const HttpRequest&) {
            return HttpReply::error(400, "'prompt' must be a string");
        });
        server_->addRoute("GET", "/ready", [](const HttpRequest&) { return HttpReply::text(200, "ready\n"); });
        ASSERT_TRUE(server_->start().isOk());
    }

    HttpClient client(std::chrono::milliseconds timeout = kTestTimeout) {
        HttpClientOptions options;
        options.timeout = timeout;
        return HttpClient("127.0.0.1", server_->port(), options);
    }

    static constexpr int kEvents = 20;
    ProducerLog log_;
    std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpStreamTest, EventsArriveInOrderEachBeforeTheNextIsWritten) {
    std::vector<std::string> events;
    auto reply = client().streamEvents("POST", "/events", "hello", [&](const SseEvent& event) {
        events.push_back(event.data);
        if (event.data != "[DONE]") log_.received();
        return true;
    });
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->content_type, "text/event-stream");
    ASSERT_NE(reply->header("cache-control"), nullptr);
    EXPECT_EQ(*reply->header("cache-control"), "no-cache");
    EXPECT_TRUE(reply->body.empty());
    ASSERT_TRUE(log_.waitFinished(kTestTimeout));
    EXPECT_FALSE(log_.timed_out);
    ASSERT_EQ(events.size(), static_cast<size_t>(kEvents + 1));
    for (int i = 0; i < kEvents; ++i) EXPECT_EQ(events[static_cast<size_t>(i)], fmt::format("hello {}", i));
    EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpStreamTest, OnTheWireItIsChunkedServerSentEvents) {
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.send("GET /hold HTTP/1.1\r\n\r\n"));
    std::string data;
    ASSERT_TRUE(raw.readUntil("data: first\n\n\r\n", data)) << data;
    EXPECT_THAT(data, HasSubstr("HTTP/1.1 200 OK\r\n"));
    EXPECT_THAT(data, HasSubstr("Transfer-Encoding: chunked\r\n"));
    EXPECT_THAT(data, HasSubstr("Content-Type: text/event-stream\r\n"));
    EXPECT_THAT(data, HasSubstr("\r\n\r\nd\r\ndata: first\n\n\r\n"));  // one chunk of 13 bytes
    EXPECT_EQ(data.find("Content-Encoding"), std::string::npos);
    raw.close();
    EXPECT_TRUE(log_.waitFinished(kTestTimeout));
}

TEST_F(HttpStreamTest, ClientDisconnectIsNoticedByTheProducerWithinABound) {
    Clock::time_point left{};
    std::vector<std::string> events;
    auto reply = client().streamEvents("GET", "/hold", "", [&](const SseEvent& event) {
        events.push_back(event.data);
        left = Clock::now();
        return false;  // the client leaves after the first event: the connection closes
    });
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_THAT(events, ElementsAre("first"));
    ASSERT_TRUE(log_.waitFinished(kTestTimeout));
    std::lock_guard lock(log_.mutex);
    ASSERT_TRUE(log_.noticed_disconnect.has_value()) << "the producer never saw the client leave";
    EXPECT_LT(*log_.noticed_disconnect - left, 2s);
    EXPECT_FALSE(log_.saw_stopping);
}

TEST_F(HttpStreamTest, AbortFromAnotherThreadCancelsTheCallAndTheProducerNotices) {
    HttpClient streaming = client();
    std::promise<void> first_event;
    auto call = std::async(std::launch::async, [&] {
        return streaming.streamEvents("GET", "/hold", "", [&](const SseEvent&) {
            first_event.set_value();
            return true;
        });
    });
    ASSERT_EQ(first_event.get_future().wait_for(kTestTimeout), std::future_status::ready);
    streaming.abort();
    ASSERT_EQ(call.wait_for(kTestTimeout), std::future_status::ready);
    EXPECT_EQ(call.get().status().code(), core::StatusCode::kCancelled);
    ASSERT_TRUE(log_.waitFinished(kTestTimeout));
    std::lock_guard lock(log_.mutex);
    EXPECT_TRUE(log_.noticed_disconnect.has_value());
}

TEST_F(HttpStreamTest, AFailedProducerEndsTheStreamUnfinishedAndTheServerKeepsServing) {
    std::vector<std::string> events;
    auto reply = client().streamEvents("GET", "/throws", "", [&](const SseEvent& event) {
        events.push_back(event.data);
        return true;
    });
    ASSERT_FALSE(reply.isOk());
    EXPECT_EQ(reply.status().code(), core::StatusCode::kPeerLost) << reply.status().toString();
    EXPECT_THAT(events, ElementsAre("before"));
    auto ready = client().get("/ready");
    ASSERT_TRUE(ready.isOk()) << ready.status().toString();
    EXPECT_EQ(ready->body, "ready\n");
}

TEST_F(HttpStreamTest, ARefusedStreamingRequestGetsItsErrorBody) {
    bool got_event = false;
    auto reply = client().streamEvents("POST", "/refused", "{}", [&](const SseEvent&) {
        got_event = true;
        return true;
    });
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();
    EXPECT_EQ(reply->status, 400);
    EXPECT_THAT(reply->body, HasSubstr("'prompt' must be a string"));
    EXPECT_FALSE(got_event);
}

TEST_F(HttpStreamTest, StopLetsAStreamEndWithALastEventWithinTheGrace) {
    std::vector<std::string> events;
    std::promise<void> first_event;
    auto call = std::async(std::launch::async, [&] {
        return client().streamEvents("GET", "/hold", "", [&](const SseEvent& event) {
            events.push_back(event.data);
            if (event.data == "first") first_event.set_value();
            return true;
        });
    });
    ASSERT_EQ(first_event.get_future().wait_for(kTestTimeout), std::future_status::ready);
    const auto start = Clock::now();
    server_->stop();
    EXPECT_LT(Clock::now() - start, 2s);
    ASSERT_EQ(call.wait_for(kTestTimeout), std::future_status::ready);
    auto reply = call.get();
    ASSERT_TRUE(reply.isOk()) << reply.status().toString();  // the stream ended properly
    EXPECT_THAT(events, ElementsAre("first", "bye"));
    std::lock_guard lock(log_.mutex);
    EXPECT_TRUE(log_.saw_stopping);
}

TEST_F(HttpStreamTest, StopEndsAProducerThatIgnoresConnectedAfterTheGrace) {
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.send("GET /stubborn HTTP/1.1\r\n\r\n"));
    std::string data;
    ASSERT_TRUE(raw.readUntil("still here", data));
    const auto start = Clock::now();
    auto stopped = std::async(std::launch::async, [this] { server_->stop(); });
    ASSERT_EQ(stopped.wait_for(kTestTimeout), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 3s);
    EXPECT_TRUE(log_.waitFinished(kTestTimeout));
}

}  // namespace
}  // namespace afd::http
