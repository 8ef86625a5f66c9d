#include "transport/socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <vector>

#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::runAsync;

TEST(Socket, ParsesHostPort) {
    core::Result<HostPort> a = parseHostPort("127.0.0.1:29500");
    ASSERT_TRUE(a.isOk());
    EXPECT_EQ(a->host, "127.0.0.1");
    EXPECT_EQ(a->port, 29500);
    core::Result<HostPort> b = parseHostPort("[::1]:80");
    ASSERT_TRUE(b.isOk());
    EXPECT_EQ(b->host, "::1");
    EXPECT_EQ(b->toString(), "[::1]:80");
    EXPECT_FALSE(parseHostPort("localhost").isOk());
    EXPECT_FALSE(parseHostPort(":80").isOk());
    EXPECT_FALSE(parseHostPort("h:0").isOk());
    EXPECT_FALSE(parseHostPort("h:65536").isOk());
    EXPECT_FALSE(parseHostPort("h:8x").isOk());
}

TEST(Socket, HostPortRefusesHostsTheResolverWouldReadAsAnotherHost) {
    // Found by fuzz/rendezvous_fuzz.cpp (an endpoint blob): getaddrinfo reads the host up to its first NUL.
    EXPECT_THAT(parseHostPort(std::string("127.0.0.1\0evil:29501", 20)).status().message(),
                HasSubstr("the host may not hold spaces, control characters or brackets"));
    EXPECT_FALSE(parseHostPort("a]:b:80").isOk());  // would name itself "[a]:b]:80", which does not parse
    EXPECT_FALSE(parseHostPort("[a[b]:80").isOk());
    EXPECT_FALSE(parseHostPort("host name:80").isOk());
    EXPECT_FALSE(parseHostPort("host\n:80").isOk());
    EXPECT_EQ(parseHostPort("[fe80::1%eth0]:80").value().host, "fe80::1%eth0");
    EXPECT_EQ(parseHostPort("ffn-0.cluster.local:1").value().port, 1);
}

TEST(Socket, ListensOnAnEphemeralPortAndMovesBytes) {
    core::Result<Listener> listener = listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listener.isOk()) << listener.status().toString();
    EXPECT_GT(listener->port, 0);
    auto client = runAsync([port = listener->port] {
        return connectTcp({"127.0.0.1", port}, deadlineAfter(10s), nullptr, "test server");
    });
    core::Result<core::UniqueFd> server = acceptTcp(listener->fd.get(), deadlineAfter(10s), nullptr, "test");
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    core::Result<core::UniqueFd> conn = client.get();
    ASSERT_TRUE(conn.isOk()) << conn.status().toString();

    // More than the socket buffers hold, so both calls have to wait for each other.
    std::vector<uint8_t> out(8 << 20), in(out.size());
    testing::fillBytes(out.data(), out.size(), 7);
    auto sender =
        runAsync([&] { return sendAll(conn->get(), out.data(), out.size(), deadlineAfter(20s), nullptr, "s"); });
    const core::Status received = recvAll(server->get(), in.data(), in.size(), deadlineAfter(20s), nullptr, "c");
    EXPECT_TRUE(received.isOk()) << received.toString();
    EXPECT_TRUE(sender.get().isOk());
    EXPECT_EQ(in, out);
}

// A port handed to another process to bind lies below the ephemeral range, where no outgoing connection takes it
// meanwhile, and binds; several picks are not all the same port.
TEST(Socket, PicksServerPortsBelowTheEphemeralRange) {
    int ephemeral_low = 32768;
    {
        std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
        int low = 0;
        int high = 0;
        if (range >> low >> high) {
            ephemeral_low = low;
        }
    }
    std::set<int> seen;
    for (int i = 0; i < 8; ++i) {
        core::Result<int> port = pickServerPort("127.0.0.1");
        ASSERT_TRUE(port.isOk()) << port.status().toString();
        if (ephemeral_low - 1024 >= 64) {
            EXPECT_GE(*port, 1024);
            EXPECT_LT(*port, ephemeral_low);
        }
        EXPECT_TRUE(listenTcp("127.0.0.1", *port).isOk()) << "port " << *port;
        seen.insert(*port);
    }
    EXPECT_GT(seen.size(), 1u);
}

TEST(Socket, ConnectRetriesUntilTheListenerStarts) {
    const int port = testing::pickFreePort();
    auto client = runAsync([port] {
        return connectTcp({"127.0.0.1", port}, deadlineAfter(20s), nullptr, "late server");
    });
    // The client is retrying: it cannot finish before a listener exists.
    EXPECT_EQ(client.wait_for(100ms), std::future_status::timeout);
    core::Result<Listener> listener = listenTcp("127.0.0.1", port);
    ASSERT_TRUE(listener.isOk()) << listener.status().toString();
    core::Result<core::UniqueFd> conn = client.get();
    EXPECT_TRUE(conn.isOk()) << conn.status().toString();
}

TEST(Socket, ConnectTimesOutNamingTheAddress) {
    const int port = testing::pickFreePort();
    core::Result<core::UniqueFd> conn = connectTcp({"127.0.0.1", port}, deadlineAfter(200ms), nullptr, "ffn rank 1");
    EXPECT_EQ(conn.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(conn.status().message(), HasSubstr(fmt::format("ffn rank 1 at 127.0.0.1:{}", port)));
}

struct Pair {
    core::UniqueFd a;
    core::UniqueFd b;
};

Pair connectedPair() {
    core::Result<Listener> listener = listenTcp("127.0.0.1", 0);
    auto client = runAsync([port = listener->port] {
        return connectTcp({"127.0.0.1", port}, deadlineAfter(10s), nullptr, "pair");
    });
    core::Result<core::UniqueFd> server = acceptTcp(listener->fd.get(), deadlineAfter(10s), nullptr, "pair");
    core::Result<core::UniqueFd> conn = client.get();
    AFD_CHECK(server.isOk() && conn.isOk(), "no connected pair");
    return {std::move(*conn), std::move(*server)};
}

TEST(Socket, RecvReportsTimeoutEofAndCancel) {
    Pair pair = connectedPair();
    uint8_t buffer[16];
    core::Status s = recvAll(pair.b.get(), buffer, sizeof(buffer), deadlineAfter(50ms), nullptr, "silent peer");
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), HasSubstr("silent peer"));

    auto cancel = Canceller::create();
    ASSERT_TRUE(cancel.isOk());
    (*cancel)->cancel();
    EXPECT_TRUE((*cancel)->cancelled());
    s = recvAll(pair.b.get(), buffer, sizeof(buffer), kNoDeadline, cancel->get(), "peer");
    EXPECT_EQ(s.code(), core::StatusCode::kCancelled);

    ASSERT_TRUE(sendAll(pair.a.get(), "abc", 3, deadlineAfter(1s), nullptr, "b").isOk());
    pair.a.reset();
    s = recvAll(pair.b.get(), buffer, sizeof(buffer), deadlineAfter(5s), nullptr, "attention rank 0");
    EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(s.message(), HasSubstr("attention rank 0 closed the connection (3 of 16 bytes received)"));
}

TEST(Socket, CancelUnblocksAWaitFromAnotherThread) {
    Pair pair = connectedPair();
    auto cancel = Canceller::create();
    ASSERT_TRUE(cancel.isOk());
    Canceller* c = cancel->get();
    auto waiter = runAsync([&] {
        uint8_t byte;
        return recvAll(pair.b.get(), &byte, 1, kNoDeadline, c, "idle peer");
    });
    c->cancel();
    ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(waiter.get().code(), core::StatusCode::kCancelled);
}

TEST(Socket, SendToAClosedPeerIsPeerLost) {
    Pair pair = connectedPair();
    pair.b.reset();
    std::vector<uint8_t> data(1 << 20);
    core::Status s = sendAll(pair.a.get(), data.data(), data.size(), deadlineAfter(5s), nullptr, "ffn rank 0");
    // The first write may land in the buffer; a later one meets the reset.
    for (int i = 0; i < 8 && s.isOk(); ++i) {
        s = sendAll(pair.a.get(), data.data(), data.size(), deadlineAfter(5s), nullptr, "ffn rank 0");
    }
    EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(s.message(), HasSubstr("ffn rank 0"));
}

}  // namespace
}  // namespace afd::transport
