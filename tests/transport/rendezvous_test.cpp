#include "transport/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <thread>

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

RankRecord record(Role role, int rank, std::string fingerprint = "fp") {
    return RankRecord{role, rank, kProtocolVersion, std::move(fingerprint)};
}

TEST(Rendezvous, AttentionMayStartBeforeTheStore) {
    const int port = testing::pickFreePort();
    auto attention =
        runAsync([port] { return Rendezvous::join(options(port, false, 1, 1, 20s), record(Role::kAttention, 0)); });
    // Attention is retrying against a store that does not exist yet.
    EXPECT_EQ(attention.wait_for(100ms), std::future_status::timeout);
    auto ffn =
        Rendezvous::join(options(port, true, 1, 1, 20s), record(Role::kFfn, 0), {{"tcp/endpoint", "127.0.0.1:4000"}});
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    auto a = attention.get();
    ASSERT_TRUE(a.isOk()) << a.status().toString();
    EXPECT_EQ((*a)->ranks(Role::kFfn).at(0).fingerprint, "fp");
    // A blob given to join is readable once the record is.
    EXPECT_EQ((*a)->fetch(Role::kFfn, 0, "tcp/endpoint", 0ms).value(), "127.0.0.1:4000");
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
    // Attention rank 0 outlasts the host (a rank that has left takes its record with it); it then loses the store.
    auto a0 =
        runAsync([port] { return Rendezvous::join(options(port, false, 3, 2, 10s), record(Role::kAttention, 0)); });
    auto ffn0 = Rendezvous::join(options(port, true, 3, 2, 500ms), record(Role::kFfn, 0));
    ASSERT_FALSE(ffn0.isOk());
    EXPECT_EQ(ffn0.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(ffn0.status().message(),
                AllOf(HasSubstr(fmt::format("rendezvous at 127.0.0.1:{} timed out after", port)),
                      HasSubstr("ffn rank 1, attention rank 1, attention rank 2 never registered")));
    EXPECT_EQ(a0.get().status().code(), core::StatusCode::kPeerLost);
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

// Joins a whole deployment of `num_attention` + `num_ffn` ranks on threads (FFN rank 0 hosts); `blobs_of(role,
// rank)` gives each rank's join blobs.
template <typename BlobsOf>
std::vector<std::unique_ptr<Rendezvous>> joinAll(int num_attention, int num_ffn, BlobsOf blobs_of) {
    const int port = testing::pickFreePort();
    std::vector<std::future<core::Result<std::unique_ptr<Rendezvous>>>> joins;
    for (int f = 0; f < num_ffn; ++f) {
        joins.push_back(runAsync([=] {
            return Rendezvous::join(options(port, f == 0, num_attention, num_ffn, 20s), record(Role::kFfn, f),
                                    blobs_of(Role::kFfn, f));
        }));
    }
    for (int a = 0; a < num_attention; ++a) {
        joins.push_back(runAsync([=] {
            return Rendezvous::join(options(port, false, num_attention, num_ffn, 20s), record(Role::kAttention, a),
                                    blobs_of(Role::kAttention, a));
        }));
    }
    std::vector<std::unique_ptr<Rendezvous>> all;
    for (auto& join : joins) {
        auto rv = join.get();
        AFD_CHECK(rv.isOk(), "{}", rv.status().toString());
        all.push_back(std::move(*rv));
    }
    return all;
}

// Joins FFN rank 0 (it leads, over the store the caller hosts at `port`, which outlives the Rendezvous as the FFN
// service's does) and attention ranks 0..num_attention-1 of a 1-FFN deployment: [ffn 0, attention 0, …].
std::vector<std::unique_ptr<Rendezvous>> joinAllAt(int port, int num_attention, int num_ffn) {
    RendezvousOptions host = options(port, true, num_attention, num_ffn, 20s);
    host.store_started = true;
    std::vector<std::future<core::Result<std::unique_ptr<Rendezvous>>>> joins;
    joins.push_back(runAsync([host] { return Rendezvous::join(host, record(Role::kFfn, 0)); }));
    for (int a = 0; a < num_attention; ++a) {
        joins.push_back(runAsync([=] {
            return Rendezvous::join(options(port, false, num_attention, num_ffn, 20s), record(Role::kAttention, a));
        }));
    }
    std::vector<std::unique_ptr<Rendezvous>> all;
    for (auto& join : joins) {
        auto rv = join.get();
        AFD_CHECK(rv.isOk(), "{}", rv.status().toString());
        all.push_back(std::move(*rv));
    }
    return all;
}

TEST(RendezvousBlobs, TwoBackendsKeysSideBySidePerRank) {
    const std::string nccl_id = std::string("\0\xff\x01", 3) + std::string(125, 'u');  // binary, 128 bytes
    // FFN ranks 0 and 1 publish a tcp endpoint at join; FFN rank 0 also an NCCL-style id.
    auto all = joinAll(2, 2, [&](Role role, int rank) {
        std::vector<RendezvousBlob> blobs;
        if (role == Role::kFfn) blobs.push_back({"tcp/endpoint", fmt::format("127.0.0.1:{}", 4000 + rank)});
        if (role == Role::kFfn && rank == 0) blobs.push_back({"nccl/unique_id", nccl_id});
        return blobs;
    });
    Rendezvous& ffn0 = *all[0];
    Rendezvous& ffn1 = *all[1];
    Rendezvous& a0 = *all[2];
    Rendezvous& a1 = *all[3];
    // A second round after the join: each attention rank publishes a handle blob under the same key name.
    ASSERT_TRUE(a0.publish("cuda_ipc/recv.stage0", "handle-a0").isOk());
    ASSERT_TRUE(a1.publish("cuda_ipc/recv.stage0", "handle-a1").isOk());
    for (Rendezvous* reader : {&ffn0, &ffn1, &a0, &a1}) {
        EXPECT_EQ(reader->fetch(Role::kFfn, 0, "tcp/endpoint", 5s).value(), "127.0.0.1:4000");
        EXPECT_EQ(reader->fetch(Role::kFfn, 1, "tcp/endpoint", 5s).value(), "127.0.0.1:4001");
        EXPECT_EQ(reader->fetch(Role::kFfn, 0, "nccl/unique_id", 5s).value(), nccl_id);
        EXPECT_EQ(reader->fetch(Role::kAttention, 0, "cuda_ipc/recv.stage0", 5s).value(), "handle-a0");
        EXPECT_EQ(reader->fetch(Role::kAttention, 1, "cuda_ipc/recv.stage0", 5s).value(), "handle-a1");
    }
}

TEST(RendezvousBlobs, AFetchWaitsForALaterPublish) {
    auto all = joinAll(1, 1, [](Role, int) { return std::vector<RendezvousBlob>{}; });
    auto waiter = runAsync([&] { return all[1]->fetch(Role::kFfn, 0, "nccl/unique_id", 10s); });
    EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout);
    ASSERT_TRUE(all[0]->publish("nccl/unique_id", "id").isOk());
    EXPECT_EQ(waiter.get().value(), "id");
}

TEST(RendezvousBlobs, AMissingKeyTimesOutNamingTheRankAndTheKey) {
    auto all = joinAll(1, 2, [](Role role, int rank) {
        return role == Role::kFfn && rank == 0 ? std::vector<RendezvousBlob>{{"tcp/endpoint", "h:1"}}
                                               : std::vector<RendezvousBlob>{};
    });
    Rendezvous& attention = *all[2];
    auto missing = attention.fetch(Role::kFfn, 1, "tcp/endpoint", 100ms);
    EXPECT_EQ(missing.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(missing.status().message(),
                AllOf(HasSubstr("rendezvous at 127.0.0.1:"), HasSubstr("ffn rank 1 did not publish 'tcp/endpoint'"),
                      HasSubstr("within 100 ms")));
    // Another backend's key of a rank that published something else is missing too.
    auto other = attention.fetch(Role::kFfn, 0, "nccl/unique_id", 0ms);
    EXPECT_EQ(other.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(other.status().message(), HasSubstr("ffn rank 0 did not publish 'nccl/unique_id'"));
    // The connection is still usable.
    EXPECT_EQ(attention.fetch(Role::kFfn, 0, "tcp/endpoint", 0ms).value(), "h:1");
}

TEST(RendezvousBlobs, KeysValuesAndCountsAreBounded) {
    EXPECT_TRUE(checkBlobKey("tcp/endpoint").isOk());
    EXPECT_TRUE(checkBlobKey(std::string(kMaxBlobKeyBytes, 'k')).isOk());
    EXPECT_THAT(checkBlobKey("").message(), HasSubstr("must have 1..128 bytes"));
    EXPECT_THAT(checkBlobKey(std::string(kMaxBlobKeyBytes + 1, 'k')).message(), HasSubstr("must have 1..128 bytes"));
    EXPECT_THAT(checkBlobKey("tcp endpoint").message(), HasSubstr("only letters, digits and '_-./'"));
    EXPECT_EQ(checkBlobKey(std::string("a\0b", 3)).code(), core::StatusCode::kInvalidArgument);

    // A bad key given to join fails before anything is registered.
    auto bad_join =
        Rendezvous::join(options(testing::pickFreePort(), true, 1, 1, 1s), record(Role::kFfn, 0), {{"bad key", "v"}});
    EXPECT_EQ(bad_join.status().code(), core::StatusCode::kInvalidArgument);

    auto all = joinAll(1, 1, [](Role, int) { return std::vector<RendezvousBlob>{}; });
    Rendezvous& ffn = *all[0];
    Rendezvous& attention = *all[1];
    const auto expectInvalid = [](const core::Status& s, const std::string& needle) {
        EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << s.toString();
        EXPECT_THAT(s.message(), HasSubstr(needle));
    };
    expectInvalid(ffn.publish("big", std::string(kMaxBlobValueBytes + 1, 'x')),
                  fmt::format("has {} bytes, more than the {}", kMaxBlobValueBytes + 1, kMaxBlobValueBytes));
    ASSERT_TRUE(ffn.publish("big", std::string(kMaxBlobValueBytes, 'x')).isOk());
    EXPECT_EQ(attention.fetch(Role::kFfn, 0, "big", 5s).value().size(), kMaxBlobValueBytes);
    expectInvalid(ffn.publish("big", "again"), "ffn rank 0 published blob 'big' already");
    expectInvalid(attention.fetch(Role::kFfn, 1, "big", 0ms).status(), "no ffn rank 1 (the deployment has 1)");
    expectInvalid(attention.fetch(Role::kAttention, -1, "big", 0ms).status(), "no attention rank -1");
    expectInvalid(attention.fetch(Role::kFfn, 0, "no key", 0ms).status(), "only letters");
    for (size_t i = 0; i < kMaxBlobsPerRank; ++i) ASSERT_TRUE(attention.publish(fmt::format("k{}", i), "v").isOk());
    expectInvalid(attention.publish("one-more", "v"), fmt::format("at most {} blobs", kMaxBlobsPerRank));
}

TEST(RendezvousBlobs, ARankClaimedTwiceIsCaughtBeforeItsFirstBlob) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto client = connectClient(port);
    ASSERT_TRUE(client->set(kOpenSessionKey, "1").isOk());  // nobody leads: the session is opened by hand
    auto first = runAsync([port] {
        return Rendezvous::join(options(port, false, 1, 2, 1s), record(Role::kFfn, 1), {{"tcp/endpoint", "a:1"}});
    });
    ASSERT_TRUE(client->get(sessionRankKey(1, Role::kFfn, 1), 10s).isOk());
    auto second = Rendezvous::join(options(port, false, 1, 2, 1s), record(Role::kFfn, 1), {{"tcp/endpoint", "b:2"}});
    EXPECT_EQ(second.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(second.status().message(),
                HasSubstr("ffn rank 1 is registered already (record {\"fingerprint\":\"fp\""));
    EXPECT_THAT(second.status().message(), HasSubstr("two processes claim the same rank"));
    // The first claim's blob stays.
    EXPECT_EQ(client->get(sessionBlobKey(1, Role::kFfn, 1, "tcp/endpoint"), 0ms).value(), "a:1");
    EXPECT_FALSE(first.get().isOk());
}

// ---- keys that live with their connection ----

TEST(RendezvousStore, AKeyOwnedByAConnectionGoesWhenItCloses) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto watcher = connectClient(port);
    auto owner = connectClient(port);
    ASSERT_TRUE(owner->set("owned", "1", KeyLifetime::kConnection).isOk());
    ASSERT_TRUE(owner->set("kept", "2").isOk());
    // Set owned first, then handed to the store's lifetime by a plain set of another client.
    ASSERT_TRUE(owner->set("handed", "3", KeyLifetime::kConnection).isOk());
    ASSERT_TRUE(watcher->set("handed", "4").isOk());
    EXPECT_EQ(watcher->get("owned", 0ms).value(), "1");
    owner.reset();
    // The store notices the close on its next poll; a get that waits briefly for a key set later sees the drop.
    const auto gone = [&](const std::string& key) {
        const auto deadline = Clock::now() + 10s;
        while (Clock::now() < deadline) {
            if (watcher->get(key, 0ms).status().code() == core::StatusCode::kTimeout) return true;
            std::this_thread::sleep_for(5ms);
        }
        return false;
    };
    EXPECT_TRUE(gone("owned"));
    EXPECT_EQ(watcher->get("kept", 0ms).value(), "2");
    EXPECT_EQ(watcher->get("handed", 0ms).value(), "4");
}

TEST(RendezvousStore, AnExclusiveClaimHoldsWhileItsOwnerLivesAndFreesWhenItGoes) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto holder = connectClient(port);
    auto rival = connectClient(port);
    ASSERT_FALSE(holder->setIfAbsent("afd/rank/attention/0", "holder", KeyLifetime::kConnection).value().has_value());
    // A live claim refuses a second one, and its value names the holder.
    EXPECT_EQ(rival->setIfAbsent("afd/rank/attention/0", "rival", KeyLifetime::kConnection).value().value_or(""),
              "holder");
    // The rival's own failed claim owns nothing: the holder's key survives the rival's close.
    rival.reset();
    auto third = connectClient(port);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(third->get("afd/rank/attention/0", 0ms).value(), "holder");
    holder.reset();
    const auto deadline = Clock::now() + 10s;
    std::optional<std::string> claimed;
    while (Clock::now() < deadline) {
        auto got = third->setIfAbsent("afd/rank/attention/0", "third", KeyLifetime::kConnection);
        ASSERT_TRUE(got.isOk()) << got.status().toString();
        if (!got->has_value()) {
            claimed = "third";
            break;
        }
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(claimed.value_or("never"), "third");
}

// ---- sessions ----

RendezvousOptions idleOptions(int port, bool host, int num_attention, int num_ffn) {
    RendezvousOptions o = options(port, host, num_attention, num_ffn, 20s);
    o.session.idle_until_attention = true;
    return o;
}

TEST(RendezvousSessions, APoolServesSessionAfterSessionWithFreshNumbers) {
    const int port = testing::pickFreePort();
    auto server = StoreServer::start("127.0.0.1", port);
    ASSERT_TRUE(server.isOk());
    RendezvousOptions host = idleOptions(port, true, 1, 2);
    host.store_started = true;
    for (uint64_t expected = 1; expected <= 3; ++expected) {
        SCOPED_TRACE(expected);
        std::vector<uint64_t> announced;
        RendezvousOptions leader = host;
        leader.session.on_session = [&announced](uint64_t s) { announced.push_back(s); };
        auto ffn0 = runAsync([&] { return Rendezvous::join(leader, record(Role::kFfn, 0)); });
        auto ffn1 = runAsync([&] { return Rendezvous::join(idleOptions(port, false, 1, 2), record(Role::kFfn, 1)); });
        // Idle: the FFN ranks wait (past what a bounded wait would allow them here) until attention rank 0 comes.
        EXPECT_EQ(ffn0.wait_for(300ms), std::future_status::timeout);
        auto a0 = Rendezvous::join(options(port, false, 1, 2, 20s), record(Role::kAttention, 0));
        ASSERT_TRUE(a0.isOk()) << a0.status().toString();
        auto f0 = ffn0.get();
        auto f1 = ffn1.get();
        ASSERT_TRUE(f0.isOk()) << f0.status().toString();
        ASSERT_TRUE(f1.isOk()) << f1.status().toString();
        EXPECT_EQ((*a0)->session(), expected);
        EXPECT_EQ((*f0)->session(), expected);
        EXPECT_EQ((*f1)->session(), expected);
        EXPECT_EQ(announced, (std::vector<uint64_t>{expected}));
        EXPECT_EQ((*a0)->ranks(Role::kFfn).at(1).session, expected);
        // Every rank leaves the session (as connectors that close do): their records go with them.
    }
    auto client = connectClient(port);
    EXPECT_EQ(client->get(kOpenSessionKey, 0ms).value(), "4");
    EXPECT_EQ(client->get(sessionRankKey(3, Role::kFfn, 0), 200ms).status().code(), core::StatusCode::kTimeout);
    EXPECT_EQ(client->get(rankRecordKey(Role::kAttention, 0), 0ms).status().code(), core::StatusCode::kTimeout);
}

TEST(RendezvousSessions, ARankThatArrivesWhileASessionRunsRegistersForTheNext) {
    auto server = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    const int port = (*server)->port();
    auto first = joinAllAt(port, 1, 1);
    ASSERT_EQ(first[0]->session(), 1u);
    // Session 1 runs (its ranks keep their Rendezvous). A second attention process of the same rank is refused at its
    // claim, whatever the sessions.
    auto duplicate = Rendezvous::join(options(port, false, 1, 1, 2s), record(Role::kAttention, 0));
    EXPECT_EQ(duplicate.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(duplicate.status().message(), HasSubstr("attention rank 0 is registered already"));
    // Once the attention rank of session 1 has gone (a crash leaves nothing else behind), its successor registers in
    // session 2, and the FFN rank that served session 1 meets it there.
    first[1].reset();
    auto next =
        runAsync([port] { return Rendezvous::join(options(port, false, 1, 1, 20s), record(Role::kAttention, 0)); });
    first[0].reset();  // the FFN rank ends session 1; the store lives on
    RendezvousOptions host = idleOptions(port, true, 1, 1);
    host.store_started = true;
    auto ffn = Rendezvous::join(host, record(Role::kFfn, 0));
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    auto a = next.get();
    ASSERT_TRUE(a.isOk()) << a.status().toString();
    EXPECT_EQ((*a)->session(), 2u);
    EXPECT_EQ((*ffn)->session(), 2u);
}

TEST(RendezvousSessions, AnIdleRankLeavesASessionTheLeaderHasClosedForTheOpenOne) {
    const int port = testing::pickFreePort();
    auto server = StoreServer::start("127.0.0.1", port);
    ASSERT_TRUE(server.isOk());
    auto client = connectClient(port);
    ASSERT_TRUE(client->set(kOpenSessionKey, "5").isOk());
    auto ffn1 = runAsync([port] { return Rendezvous::join(idleOptions(port, false, 1, 2), record(Role::kFfn, 1)); });
    ASSERT_TRUE(client->get(sessionRankKey(5, Role::kFfn, 1), 10s).isOk());
    // The leader closes session 5 (its join failed, say) and opens 6: the idle rank follows within a check.
    ASSERT_TRUE(client->set(kOpenSessionKey, "6").isOk());
    ASSERT_TRUE(client->get(sessionRankKey(6, Role::kFfn, 1), 10s).isOk());
    const auto deadline = Clock::now() + 10s;
    while (Clock::now() < deadline && client->get(sessionRankKey(5, Role::kFfn, 1), 0ms).isOk()) {
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(client->get(sessionRankKey(5, Role::kFfn, 1), 0ms).status().code(), core::StatusCode::kTimeout)
        << "what the rank left in session 5 goes with the connection it left";
    RendezvousOptions host = options(port, true, 1, 2, 20s);
    host.store_started = true;
    auto ffn0 = runAsync([host] { return Rendezvous::join(host, record(Role::kFfn, 0)); });
    auto a0 = Rendezvous::join(options(port, false, 1, 2, 20s), record(Role::kAttention, 0));
    ASSERT_TRUE(a0.isOk()) << a0.status().toString();
    EXPECT_EQ((*a0)->session(), 6u);
    EXPECT_EQ(ffn1.get().value()->session(), 6u);
    EXPECT_TRUE(ffn0.get().isOk());
}

TEST(RendezvousSessions, AStopEndsAnIdleWaitAtOnce) {
    const int port = testing::pickFreePort();
    auto cancel = Canceller::create();
    ASSERT_TRUE(cancel.isOk());
    RendezvousOptions host = idleOptions(port, true, 1, 1);
    host.cancel = cancel->get();
    auto ffn0 = runAsync([host] { return Rendezvous::join(host, record(Role::kFfn, 0)); });
    EXPECT_EQ(ffn0.wait_for(300ms), std::future_status::timeout);
    const auto start = Clock::now();
    (*cancel)->cancel();
    EXPECT_EQ(ffn0.get().status().code(), core::StatusCode::kCancelled);
    EXPECT_LT(Clock::now() - start, 2s);
}

}  // namespace
}  // namespace afd::transport
