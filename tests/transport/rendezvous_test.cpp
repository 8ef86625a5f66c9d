#include "transport/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "transport/frame.h"
#include "transport/rendezvous_store.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::runAsync;

std::unique_ptr<StoreClient> connectClient(int port) {
    auto client = StoreClient::connect({"127.0.0.1", port}, deadlineAfter(10s), nullptr);
    AFD_CHECK(client.isOk(), "{}", client.status().toString());
    return std::move(*client);
}

TEST(RendezvousStore, SetGetAndWaitForAKey) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    auto a = connectClient((*server)->port());
    auto b = connectClient((*server)->port());

    ASSERT_TRUE(a->set("nccl/id", std::string("\0\x01\x02", 3)).isOk());
    core::Result<std::string> got = b->get("nccl/id", 0ms);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, std::string("\0\x01\x02", 3));

    // b waits for a key that a sets later.
    auto waiter = runAsync([&] { return b->get("ipc/handle", 10s); });
    EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout);
    ASSERT_TRUE(a->set("ipc/handle", "h1").isOk());
    got = waiter.get();
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, "h1");

    core::Result<std::optional<std::string>> first = a->setIfAbsent("once", "x");
    ASSERT_TRUE(first.isOk());
    EXPECT_FALSE(first->has_value());
    core::Result<std::optional<std::string>> second = b->setIfAbsent("once", "y");
    ASSERT_TRUE(second.isOk());
    EXPECT_EQ(second->value_or(""), "x");
}

TEST(RendezvousStore, GetTimesOutNamingTheKey) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    auto client = connectClient((*server)->port());
    core::Result<std::string> got = client->get("afd/never", 100ms);
    EXPECT_EQ(got.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(got.status().message(), HasSubstr("key 'afd/never' not set within 100 ms"));
    // The connection is still in step with the server.
    ASSERT_TRUE(client->set("k", "v").isOk());
    EXPECT_EQ(client->get("k", 0ms).value(), "v");
}

TEST(RendezvousStore, MalformedRequestClosesOnlyThatClient) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto good = connectClient(port);

    auto raw = connectTcp({"127.0.0.1", port}, deadlineAfter(10s), nullptr, "store");
    ASSERT_TRUE(raw.isOk());
    // A request body length beyond any allowed size.
    const uint8_t oversized[8] = {0xff, 0xff, 0xff, 0x7f, 1, 0, 1, 0};
    ASSERT_TRUE(sendAll(raw->get(), oversized, sizeof(oversized), deadlineAfter(5s), nullptr, "store").isOk());
    uint8_t byte;
    EXPECT_EQ(recvAll(raw->get(), &byte, 1, deadlineAfter(5s), nullptr, "store").code(), core::StatusCode::kPeerLost);

    auto raw2 = connectTcp({"127.0.0.1", port}, deadlineAfter(10s), nullptr, "store");
    ASSERT_TRUE(raw2.isOk());
    // A well-sized request with an unknown op.
    const uint8_t bad_op[13] = {9, 0, 0, 0, 77, 0, 1, 0, 0, 0, 0, 0, 'k'};
    ASSERT_TRUE(sendAll(raw2->get(), bad_op, sizeof(bad_op), deadlineAfter(5s), nullptr, "store").isOk());
    EXPECT_EQ(recvAll(raw2->get(), &byte, 1, deadlineAfter(5s), nullptr, "store").code(), core::StatusCode::kPeerLost);

    ASSERT_TRUE(good->set("still", "served").isOk());
    EXPECT_EQ(good->get("still", 0ms).value(), "served");
}

TEST(RendezvousStore, ClientRejectsOversizedValues) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    auto client = connectClient((*server)->port());
    EXPECT_EQ(client->set("k", std::string(kMaxStoreValueBytes + 1, 'x')).code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(client->set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v").code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(client->set("k", std::string(kMaxStoreValueBytes, 'x')).isOk());
}

RendezvousOptions options(int port, bool host, int num_attention, int num_ffn, std::chrono::milliseconds timeout) {
    RendezvousOptions o;
    o.store = {"127.0.0.1", port};
    o.host_store = host;
    o.num_attention_ranks = num_attention;
    o.num_ffn_ranks = num_ffn;
    o.timeout = timeout;
    return o;
}

RankRecord record(Role role, int rank, std::string fingerprint = "fp", std::string endpoint = "") {
    return RankRecord{role, rank, kProtocolVersion, std::move(fingerprint), std::move(endpoint)};
}

TEST(Rendezvous, AttentionMayStartBeforeTheStore) {
    const int port = testing::pickFreePort();
    auto attention =
        runAsync([port] { return Rendezvous::join(options(port, false, 1, 1, 20s), record(Role::kAttention, 0)); });
    // Attention is retrying against a store that does not exist yet.
    EXPECT_EQ(attention.wait_for(100ms), std::future_status::timeout);
    auto ffn = Rendezvous::join(options(port, true, 1, 1, 20s), record(Role::kFfn, 0, "fp", "127.0.0.1:4000"));
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    auto a = attention.get();
    ASSERT_TRUE(a.isOk()) << a.status().toString();
    EXPECT_EQ((*a)->ranks(Role::kFfn).at(0).endpoint, "127.0.0.1:4000");
    EXPECT_EQ((*ffn)->ranks(Role::kAttention).size(), 1u);
}

TEST(Rendezvous, StoreMayStartBeforeEveryone) {
    const int port = testing::pickFreePort();
    auto ffn0 = runAsync([port] { return Rendezvous::join(options(port, true, 2, 2, 20s), record(Role::kFfn, 0)); });
    auto ffn1 = runAsync([port] { return Rendezvous::join(options(port, false, 2, 2, 20s), record(Role::kFfn, 1)); });
    auto a0 =
        runAsync([port] { return Rendezvous::join(options(port, false, 2, 2, 20s), record(Role::kAttention, 0)); });
    auto a1 = Rendezvous::join(options(port, false, 2, 2, 20s), record(Role::kAttention, 1));
    EXPECT_TRUE(a1.isOk()) << a1.status().toString();
    EXPECT_TRUE(a0.get().isOk());
    EXPECT_TRUE(ffn1.get().isOk());
    EXPECT_TRUE(ffn0.get().isOk());
}

TEST(Rendezvous, TimeoutNamesEveryRankThatNeverRegistered) {
    const int port = testing::pickFreePort();
    // Attention rank 0 gives up first, so that it is never left talking to a store that is gone.
    auto a0 =
        runAsync([port] { return Rendezvous::join(options(port, false, 3, 2, 300ms), record(Role::kAttention, 0)); });
    auto ffn0 = Rendezvous::join(options(port, true, 3, 2, 500ms), record(Role::kFfn, 0));
    ASSERT_FALSE(ffn0.isOk());
    EXPECT_EQ(ffn0.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(ffn0.status().message(),
                AllOf(HasSubstr(fmt::format("rendezvous at 127.0.0.1:{} timed out after", port)),
                      HasSubstr("ffn rank 1, attention rank 1, attention rank 2 never registered")));
    EXPECT_EQ(a0.get().status().code(), core::StatusCode::kTimeout);
}

TEST(Rendezvous, FingerprintMismatchIsFatalOnBothSidesWithBothValues) {
    const int port = testing::pickFreePort();
    auto attention = runAsync(
        [port] { return Rendezvous::join(options(port, false, 1, 1, 20s), record(Role::kAttention, 0, "model-b")); });
    auto ffn = Rendezvous::join(options(port, true, 1, 1, 20s), record(Role::kFfn, 0, "model-a"));
    auto a = attention.get();
    ASSERT_FALSE(ffn.isOk());
    ASSERT_FALSE(a.isOk());
    EXPECT_EQ(ffn.status().code(), core::StatusCode::kMismatch);
    EXPECT_EQ(a.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(
        ffn.status().message(),
        HasSubstr("fingerprint mismatch: attention rank 0 has 'model-b', ffn rank 0 (this rank) has 'model-a'"));
    EXPECT_THAT(
        a.status().message(),
        HasSubstr("fingerprint mismatch: ffn rank 0 has 'model-a', attention rank 0 (this rank) has 'model-b'"));
}

TEST(Rendezvous, ProtocolVersionMismatchIsFatalOnBothSidesWithBothValues) {
    const int port = testing::pickFreePort();
    RankRecord old = record(Role::kAttention, 0);
    old.protocol_version = kProtocolVersion + 1;
    auto attention = runAsync([port, old] { return Rendezvous::join(options(port, false, 1, 1, 20s), old); });
    auto ffn = Rendezvous::join(options(port, true, 1, 1, 20s), record(Role::kFfn, 0));
    auto a = attention.get();
    ASSERT_FALSE(ffn.isOk());
    ASSERT_FALSE(a.isOk());
    const uint32_t v = kProtocolVersion;
    EXPECT_THAT(ffn.status().message(),
                HasSubstr(fmt::format("protocol version mismatch: attention rank 0 speaks version {}, ffn rank 0 "
                                      "(this rank) speaks version {}",
                                      v + 1, v)));
    EXPECT_THAT(a.status().message(),
                HasSubstr(fmt::format("protocol version mismatch: ffn rank 0 speaks version {}, attention rank 0 "
                                      "(this rank) speaks version {}",
                                      v, v + 1)));
}

TEST(Rendezvous, DuplicateRegistrationNamesTheRank) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto first =
        runAsync([port] { return Rendezvous::join(options(port, false, 2, 1, 1s), record(Role::kAttention, 1)); });
    auto client = connectClient(port);
    // Wait until the first process has registered, then claim the same rank.
    ASSERT_TRUE(client->get("afd/rank/attention/1", 10s).isOk());
    auto second = Rendezvous::join(options(port, false, 2, 1, 1s), record(Role::kAttention, 1));
    EXPECT_EQ(second.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(second.status().message(), HasSubstr("attention rank 1 is registered already"));
    EXPECT_FALSE(first.get().isOk());  // nobody else ever arrives
}

}  // namespace
}  // namespace afd::transport
