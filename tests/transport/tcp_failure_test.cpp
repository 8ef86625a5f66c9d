// Setup order, handshake rejections, option checks, cancellation, lost peers and timeouts of the tcp connectors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "transport/frame.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;
using namespace afd::transport::testing;

const FrameSpec kSpec{{{core::DType::kF32, 4}}};

tcp::TcpConnectorOptions options(Role role, int rank, int num_attention, int num_ffn, int port,
                                 std::vector<int> peers) {
    auto o = baseOptions(role, rank, num_attention, num_ffn, port);
    o.peers = std::move(peers);
    return o;
}

TEST(TcpSetup, AttentionMayStartBeforeTheFfnRanks) {
    const int port = pickFreePort();
    auto attention =
        runAsync([port] { return tcp::createAttentionConnector(options(Role::kAttention, 0, 1, 1, port, {0})); });
    EXPECT_EQ(attention.wait_for(100ms), std::future_status::timeout);  // waiting for a store that is not up yet
    auto ffn = tcp::createFfnConnector(options(Role::kFfn, 0, 1, 1, port, {0}));
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    auto a = attention.get();
    ASSERT_TRUE(a.isOk()) << a.status().toString();
    EXPECT_THAT((*a)->peers()[0].describe(), StartsWith("ffn rank 0 (127.0.0.1:"));
    EXPECT_THAT((*ffn)->peers()[0].describe(), StartsWith("attention rank 0 (127.0.0.1:"));
}

TEST(TcpSetup, FfnMayStartFirstAndTimesOutNamingWhoNeverCame) {
    const int port = pickFreePort();
    auto o = options(Role::kFfn, 0, 2, 1, port, {0, 1});
    o.rendezvous_timeout = 300ms;
    auto ffn = tcp::createFfnConnector(o);
    EXPECT_EQ(ffn.status().code(), core::StatusCode::kTimeout);
    EXPECT_THAT(ffn.status().message(), HasSubstr("attention rank 0, attention rank 1 never registered"));
}

TEST(TcpSetup, OptionsAreValidatedWithTheFieldNamed) {
    const auto expectInvalid = [](tcp::TcpConnectorOptions o, const std::string& text) {
        const core::Status s = tcp::validateOptions(o);
        EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << text;
        EXPECT_THAT(s.message(), HasSubstr(text));
    };
    const auto good = options(Role::kFfn, 1, 4, 2, 29500, {2, 3});
    EXPECT_TRUE(tcp::validateOptions(good).isOk());
    auto o = good;
    o.rank = 2;
    expectInvalid(o, "rank must be in 0..1");
    o = good;
    o.peers = {};
    expectInvalid(o, "peers is empty");
    o.peers = {3, 4};
    expectInvalid(o, "peer attention rank 4 is out of range 0..3");
    o.peers = {3, 3};
    expectInvalid(o, "listed twice");
    o = good;
    o.store_port = 70000;
    expectInvalid(o, "store_port 70000");
    o = good;
    o.bind_host = "0.0.0.0";
    expectInvalid(o, "set advertise_host");
    o.advertise_host = "10.0.0.5";
    EXPECT_TRUE(tcp::validateOptions(o).isOk());
    o = good;
    o.fingerprint = "";
    expectInvalid(o, "fingerprint must have");
    o = good;
    o.step_timeout = 0ms;
    expectInvalid(o, "must be positive");
    o = good;
    o.max_rows = 0;
    expectInvalid(o, "max_rows");
    o = good;
    o.max_frame_bytes = 0;
    expectInvalid(o, "max_frame_bytes");
    EXPECT_EQ(tcp::createFfnConnector(options(Role::kAttention, 0, 1, 1, 29500, {0})).status().code(),
              core::StatusCode::kInvalidArgument);
}

TEST(TcpSetup, FfnRejectsUnknownDuplicateAndMismatchedHellosAndKeepsWaiting) {
    const int port = pickFreePort();
    auto ffn = runAsync([port] { return tcp::createFfnConnector(options(Role::kFfn, 0, 2, 1, port, {0, 1})); });
    // Two attention ranks take part in the rendezvous by hand; then come several bad hellos.
    RendezvousOptions r;
    r.store = {"127.0.0.1", port};
    r.num_attention_ranks = 2;
    r.num_ffn_ranks = 1;
    auto rendezvous1 = runAsync([r] {
        return Rendezvous::join(r, {Role::kAttention, 1, kProtocolVersion, "qwen3-moe-test/2a2f"});
    });
    auto rendezvous = Rendezvous::join(r, {Role::kAttention, 0, kProtocolVersion, "qwen3-moe-test/2a2f"});
    ASSERT_TRUE(rendezvous1.get().isOk());
    ASSERT_TRUE(rendezvous.isOk()) << rendezvous.status().toString();
    auto published = (*rendezvous)->fetch(Role::kFfn, 0, tcp::kEndpointBlob, 10s);
    ASSERT_TRUE(published.isOk()) << published.status().toString();
    auto endpoint = parseHostPort(*published);
    ASSERT_TRUE(endpoint.isOk());
    const PeerInfo ffn_peer{Role::kFfn, 0, endpoint->toString()};
    const auto hello = [&](Role role, int rank, std::string fingerprint) {
        const FrameLimits limits = limitsOf(options(Role::kFfn, 0, 2, 1, port, {0, 1}));
        return tcp::connectAndHello(*endpoint, ffn_peer, {role, rank, std::move(fingerprint), limits},
                                    deadlineAfter(10s), nullptr);
    };
    auto unknown = hello(Role::kAttention, 7, "qwen3-moe-test/2a2f");
    EXPECT_EQ(unknown.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(unknown.status().message(),
                AllOf(HasSubstr("rejected the hello of attention rank 7"),
                      HasSubstr("ffn rank 0 does not serve attention rank 7 (its attention peers are 0, 1)")));
    auto wrong_role = hello(Role::kFfn, 0, "qwen3-moe-test/2a2f");
    EXPECT_THAT(wrong_role.status().message(), HasSubstr("accepts attention ranks only"));
    auto other_model = hello(Role::kAttention, 0, "other-model");
    EXPECT_THAT(other_model.status().message(),
                HasSubstr("fingerprint mismatch: attention rank 0 has 'other-model', ffn rank 0 has "
                          "'qwen3-moe-test/2a2f'"));
    {
        // A hello of another protocol version: the error frame names both versions.
        auto fd = connectTcp(*endpoint, deadlineAfter(10s), nullptr, "ffn rank 0");
        ASSERT_TRUE(fd.isOk());
        std::vector<uint8_t> future = encodeHelloFrame(Role::kAttention, 0, "qwen3-moe-test/2a2f",
                                                       limitsOf(options(Role::kFfn, 0, 2, 1, port, {0, 1})));
        future[4] = static_cast<uint8_t>(kProtocolVersion + 1);
        ASSERT_TRUE(sendRaw(fd->get(), future, 10s).isOk());
        HeaderBytes head{};
        ASSERT_TRUE(recvAll(fd->get(), head.data(), head.size(), deadlineAfter(10s), nullptr, "ffn").isOk());
        auto header = decodeHeader(head, {}, "ffn");
        ASSERT_TRUE(header.isOk());
        ASSERT_EQ(header->kind, FrameKind::kError);
        std::string text(header->payload_bytes, '\0');
        ASSERT_TRUE(recvAll(fd->get(), text.data(), text.size(), deadlineAfter(10s), nullptr, "ffn").isOk());
        EXPECT_THAT(text, HasSubstr(fmt::format("frame of protocol version {}, this rank speaks version {}",
                                                kProtocolVersion + 1, kProtocolVersion)));
    }
    auto good = hello(Role::kAttention, 0, "qwen3-moe-test/2a2f");
    ASSERT_TRUE(good.isOk()) << good.status().toString();
    auto duplicate = hello(Role::kAttention, 0, "qwen3-moe-test/2a2f");
    EXPECT_THAT(duplicate.status().message(), HasSubstr("connected to attention rank 0 already (duplicate hello)"));
    // The legitimate rank 1 still gets in and the FFN completes.
    ASSERT_TRUE(hello(Role::kAttention, 1, "qwen3-moe-test/2a2f").isOk());
    auto connector = ffn.get();
    ASSERT_TRUE(connector.isOk()) << connector.status().toString();
    EXPECT_EQ((*connector)->peers().size(), 2u);
}

// A connected 1 attention × `num_ffn` FFN deployment.
Deployment connectOneToMany(int num_attention, int num_ffn, std::chrono::milliseconds step_timeout) {
    const int port = pickFreePort();
    std::vector<tcp::TcpConnectorOptions> all;
    for (int f = 0; f < num_ffn; ++f)
        all.push_back(options(Role::kFfn, f, num_attention, num_ffn, port, allRanks(num_attention)));
    for (int a = 0; a < num_attention; ++a) {
        all.push_back(options(Role::kAttention, a, num_attention, num_ffn, port, allRanks(num_ffn)));
    }
    for (auto& o : all) o.step_timeout = step_timeout;
    auto d = connectAll(all);
    AFD_CHECK(d.isOk(), "{}", d.status().toString());
    return std::move(*d);
}

StepHeader step(uint64_t id) {
    StepHeader h;
    h.step = id;
    return h;
}

FramePayload payload(uint32_t rows, uint64_t seed) { return {rows, {makeTensor(core::DType::kF32, rows, 4, seed)}}; }

TEST(TcpConnector, CancelUnblocksAnIdleReceiveStepQuickly) {
    Deployment d = connectOneToMany(1, 1, 30s);
    FfnConnector& ffn = *d.ffn[0];
    auto waiter = runAsync([&ffn] { return ffn.receiveStep().status(); });
    EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout);  // idle: no header will come
    const auto start = Clock::now();
    ffn.cancel();
    ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 1s);
    const core::Status s = waiter.get();
    EXPECT_EQ(s.code(), core::StatusCode::kCancelled);
    EXPECT_THAT(s.message(), HasSubstr("waiting for the next step header: cancelled"));
    EXPECT_EQ(ffn.receiveStep().status().code(), core::StatusCode::kCancelled);
    ffn.close();
    ffn.close();
}

TEST(TcpConnector, AttentionPeerClosingMidStepIsPeerLostNamingIt) {
    Deployment d = connectOneToMany(2, 1, 30s);
    ASSERT_TRUE(d.attention[0]->sendStep(step(0)).isOk());
    ASSERT_TRUE(d.attention[1]->sendStep(step(0)).isOk());
    auto info = d.ffn[0]->receiveStep();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    FramePayload p = payload(3, 1);
    ASSERT_TRUE(d.attention[0]->dispatch({0, 0, 0}, std::span(&p, 1)).isOk());
    FfnConnector& ffn = *d.ffn[0];
    auto receiving = runAsync([&ffn] { return ffn.receive({0, 0, 0}, kSpec).status(); });
    const auto start = Clock::now();
    d.attention[1]->close();  // rank 1 dies before its frame
    ASSERT_EQ(receiving.wait_for(5s), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 1s);
    const core::Status s = receiving.get();
    EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(s.message(), AllOf(StartsWith("attention rank 1 (127.0.0.1:"), HasSubstr("closed the connection")));
}

TEST(TcpConnector, FfnPeerClosingMidStepIsPeerLostNamingIt) {
    Deployment d = connectOneToMany(1, 2, 30s);
    AttentionConnector& attention = *d.attention[0];
    ASSERT_TRUE(attention.sendStep(step(0)).isOk());
    std::vector<FramePayload> payloads = {payload(2, 1), payload(0, 2)};
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, payloads).isOk());
    for (int f = 0; f < 2; ++f) ASSERT_TRUE(d.ffn[f]->receiveStep().isOk());
    auto frames = d.ffn[0]->receive({0, 0, 0}, kSpec);
    ASSERT_TRUE(frames.isOk()) << frames.status().toString();
    EXPECT_EQ((*frames)[0].rows, 2u);
    FramePayload reply = payload(2, 3);
    ASSERT_TRUE(d.ffn[0]->send({0, 0, 0}, std::span(&reply, 1)).isOk());
    auto combining = runAsync([&attention] { return attention.combine({0, 0, 0}, kSpec).status(); });
    const auto start = Clock::now();
    d.ffn[1]->close();  // ffn rank 1 dies before its reply
    ASSERT_EQ(combining.wait_for(5s), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 1s);
    const core::Status s = combining.get();
    EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(s.message(), StartsWith("ffn rank 1 (127.0.0.1:"));
}

TEST(TcpConnector, SilentFfnPeerHitsTheStepTimeout) {
    Deployment d = connectOneToMany(1, 1, 300ms);
    ASSERT_TRUE(d.attention[0]->sendStep(step(4)).isOk());
    FramePayload p = payload(1, 1);
    ASSERT_TRUE(d.attention[0]->dispatch({4, 2, 0}, std::span(&p, 1)).isOk());
    ASSERT_TRUE(d.ffn[0]->receiveStep().isOk());
    ASSERT_TRUE(d.ffn[0]->receive({4, 2, 0}, kSpec).isOk());  // and never answers
    const auto start = Clock::now();
    const core::Status s = d.attention[0]->combine({4, 2, 0}, kSpec).status();
    EXPECT_GE(Clock::now() - start, 300ms);
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("waiting for f2a frames of step 4 layer 2 stage 0: timed out after"),
                                   HasSubstr("waiting on ffn rank 0 (127.0.0.1:")));
}

TEST(TcpConnector, AStepTimeoutNamesOnlyThePeersStillOwingTheirFrame) {
    Deployment d = connectOneToMany(1, 3, 300ms);
    AttentionConnector& attention = *d.attention[0];
    ASSERT_TRUE(attention.sendStep(step(5)).isOk());
    std::vector<FramePayload> payloads = {payload(1, 1), payload(1, 2), payload(1, 3)};
    ASSERT_TRUE(attention.dispatch({5, 1, 0}, payloads).isOk());
    for (int f = 0; f < 3; ++f) {
        ASSERT_TRUE(d.ffn[f]->receiveStep().isOk());
        ASSERT_TRUE(d.ffn[f]->receive({5, 1, 0}, kSpec).isOk());
    }
    // ffn rank 1 answers; ranks 0 and 2 never do.
    FramePayload reply = payload(1, 4);
    ASSERT_TRUE(d.ffn[1]->send({5, 1, 0}, std::span(&reply, 1)).isOk());
    const core::Status s = attention.combine({5, 1, 0}, kSpec).status();
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("waiting for f2a frames of step 5 layer 1 stage 0: timed out after"),
                                   HasSubstr("waiting on ffn rank 0 (127.0.0.1:"), HasSubstr("ffn rank 2 (127.0.0.1:"),
                                   Not(HasSubstr("ffn rank 1"))));
}

TEST(TcpConnector, AnFfnStepTimeoutNamesOnlyTheAttentionPeersStillOwingTheirFrame) {
    Deployment d = connectOneToMany(3, 1, 300ms);
    for (int a = 0; a < 3; ++a) ASSERT_TRUE(d.attention[a]->sendStep(step(2)).isOk());
    ASSERT_TRUE(d.ffn[0]->receiveStep().isOk());
    FramePayload p = payload(2, 1);
    ASSERT_TRUE(d.attention[2]->dispatch({2, 0, 0}, std::span(&p, 1)).isOk());  // ranks 0 and 1 stay silent
    const core::Status s = d.ffn[0]->receive({2, 0, 0}, kSpec).status();
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("waiting on attention rank 0 (127.0.0.1:"),
                                   HasSubstr("attention rank 1 (127.0.0.1:"), Not(HasSubstr("attention rank 2"))));
}

TEST(TcpConnector, SilentAttentionPeerHitsTheStepTimeoutOnceTheStepHasBegun) {
    Deployment d = connectOneToMany(2, 1, 300ms);
    ASSERT_TRUE(d.attention[0]->sendStep(step(9)).isOk());  // rank 1 never sends its header
    const core::Status s = d.ffn[0]->receiveStep().status();
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("step 9 header of every attention peer (attention rank 0"),
                                   HasSubstr("waiting on attention rank 1 (127.0.0.1:")));
}

TEST(TcpConnector, PeersDisagreeingOnTheStepIsAMismatchNamingBoth) {
    Deployment d = connectOneToMany(2, 1, 5s);
    ASSERT_TRUE(d.attention[0]->sendStep(step(3)).isOk());
    StepHeader other = step(4);
    other.flags = kStepWarmup;
    ASSERT_TRUE(d.attention[1]->sendStep(other).isOk());
    const core::Status s = d.ffn[0]->receiveStep().status();
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("step header mismatch: attention rank 0 (127.0.0.1:"),
                                   HasSubstr("sent step 3 (flags none, 1 stage), attention rank 1 (127.0.0.1:"),
                                   HasSubstr("sent step 4 (flags warmup, 1 stage)")));
}

TEST(TcpConnector, CallerErrorsAreRejectedBeforeAnythingIsSent) {
    Deployment d = connectOneToMany(1, 1, 5s);
    AttentionConnector& attention = *d.attention[0];
    StepHeader three = step(0);
    three.num_stages = 3;
    EXPECT_EQ(attention.sendStep(three).code(), core::StatusCode::kInvalidArgument);
    ASSERT_TRUE(attention.sendStep(step(0)).isOk());
    std::vector<FramePayload> none;
    EXPECT_THAT(attention.dispatch({0, 0, 0}, none).message(), HasSubstr("0 payloads for 1 ffn peers"));
    FramePayload too_many{65, {makeTensor(core::DType::kF32, 65, 4, 1)}};
    EXPECT_THAT(attention.dispatch({0, 0, 0}, std::span(&too_many, 1)).message(), HasSubstr("65 rows, at most 64"));
    FramePayload wrong_shape{2, {makeTensor(core::DType::kF32, 3, 4, 1)}};
    EXPECT_THAT(attention.dispatch({0, 0, 0}, std::span(&wrong_shape, 1)).message(),
                HasSubstr("segment 0 is [3, 4] F32 on cpu, expected a CPU tensor [2, cols]"));
    EXPECT_THAT(attention.combine({0, 0, 0}, kSpec).status().message(), HasSubstr("without a matching dispatch"));
    FramePayload good = payload(1, 1);
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, std::span(&good, 1)).isOk());
    EXPECT_THAT(attention.dispatch({0, 1, 0}, std::span(&good, 1)).message(), HasSubstr("awaits its combine"));
    // None of that broke the connection: the exchange completes.
    ASSERT_TRUE(d.ffn[0]->receiveStep().isOk());
    auto frames = d.ffn[0]->receive({0, 0, 0}, kSpec);
    ASSERT_TRUE(frames.isOk()) << frames.status().toString();
    ASSERT_TRUE(d.ffn[0]->send({0, 0, 0}, std::span(&good, 1)).isOk());
    auto back = attention.combine({0, 0, 0}, kSpec);
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(compareTensor((*back)[0].segments[0], core::DType::kF32, 1, 4, 1), "");
}

TEST(TcpConnector, CombinedViewsStayValidUntilTheNextCombineOfTheStage) {
    Deployment d = connectOneToMany(1, 1, 5s);
    AttentionConnector& attention = *d.attention[0];
    FfnConnector& ffn = *d.ffn[0];
    ASSERT_TRUE(attention.sendStep(step(0)).isOk());
    ASSERT_TRUE(ffn.receiveStep().isOk());
    FramePayload out0 = payload(2, 10), out1 = payload(2, 11);
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, std::span(&out0, 1)).isOk());
    ASSERT_TRUE(ffn.receive({0, 0, 0}, kSpec).isOk());
    FramePayload reply0 = payload(2, 20), reply1 = payload(2, 21);
    ASSERT_TRUE(ffn.send({0, 0, 0}, std::span(&reply0, 1)).isOk());
    auto first = attention.combine({0, 0, 0}, kSpec);
    ASSERT_TRUE(first.isOk());
    const core::Tensor first_view = (*first)[0].segments[0];
    // Put the reply of layer 1 on its way before attention dispatches layer 1, so that attention reads it during
    // that dispatch: it must land beside, not over, the views of the previous combine.
    ASSERT_TRUE(ffn.send({0, 1, 0}, std::span(&reply1, 1)).isOk());
    ASSERT_TRUE(attention.dispatch({0, 1, 0}, std::span(&out1, 1)).isOk());
    EXPECT_EQ(compareTensor(first_view, core::DType::kF32, 2, 4, 20), "");
    auto second = attention.combine({0, 1, 0}, kSpec);
    ASSERT_TRUE(second.isOk()) << second.status().toString();
    EXPECT_EQ(compareTensor((*second)[0].segments[0], core::DType::kF32, 2, 4, 21), "");
}

}  // namespace
}  // namespace afd::transport
