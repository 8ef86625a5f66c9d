// The frame limits of the tcp handshake: each hello carries the sender's limits, two sides with different limits
// are refused at the hello (with both values and the config keys named), equal limits connect, and a frame over
// the agreed limits is refused by its sender before any byte leaves, so the peer is never left waiting on it.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>

#include "core/check.h"
#include "core/exit_codes.h"
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

constexpr int64_t kCols = 4;  // F32 columns of every test frame: 16 bytes a row

tcp::TcpConnectorOptions options(Role role, int port, uint32_t max_rows, size_t max_frame_bytes) {
    auto o = baseOptions(role, 0, 1, 1, port);
    o.peers = {0};
    o.max_rows = max_rows;
    o.max_frame_bytes = max_frame_bytes;
    return o;
}

struct Refusal {
    core::Status attention;
    core::Status ffn;
};

// Starts both sides of a 1 × 1 deployment; the FFN gives up after a short wait (it keeps listening after a refusal).
Refusal connectExpectingRefusal(tcp::TcpConnectorOptions attention, tcp::TcpConnectorOptions ffn) {
    ffn.rendezvous_timeout = 1500ms;
    auto ffn_side = runAsync([ffn] { return tcp::createFfnConnector(ffn).status(); });
    const core::Status a = tcp::createAttentionConnector(attention).status();
    return {a, ffn_side.get()};
}

TEST(TcpFrameLimits, AttentionWithLargerLimitsIsRefusedNamingBothValuesAndTheirKeys) {
    const int port = pickFreePort();
    const Refusal r =
        connectExpectingRefusal(options(Role::kAttention, port, 32, 2 << 20), options(Role::kFfn, port, 16, 1 << 20));
    EXPECT_EQ(r.attention.code(), core::StatusCode::kMismatch) << r.attention.toString();
    // A handshake mismatch, like a fingerprint mismatch.
    EXPECT_EQ(core::exitCodeFor(r.attention), core::kExitFailure);
    const std::string rows = "max rows per frame: attention rank 0 has 32, ffn rank 0 has 16 (from afd.max_num_tokens)";
    const std::string bytes = fmt::format(
        "max payload bytes per data frame: attention rank 0 has {}, ffn rank 0 has {} (from afd.max_num_tokens rows "
        "of the widest frame: the model's hidden_size, and num_experts_per_tok in m2n)",
        2 << 20, 1 << 20);
    EXPECT_THAT(r.attention.message(),
                AllOf(StartsWith("ffn rank 0 (127.0.0.1:"), HasSubstr("rejected the hello of attention rank 0"),
                      HasSubstr("frame limits mismatch: " + rows + "; " + bytes)));
    // The FFN keeps waiting for a valid hello and, at its deadline, names the refused one.
    EXPECT_EQ(r.ffn.code(), core::StatusCode::kTimeout) << r.ffn.toString();
    EXPECT_THAT(r.ffn.message(), AllOf(HasSubstr("attention rank 0 never connected"),
                                       HasSubstr("(last rejected hello: frame limits mismatch: " + rows)));
}

TEST(TcpFrameLimits, FfnWithLargerLimitsIsRefusedNamingOnlyWhatDiffers) {
    const int port = pickFreePort();
    const Refusal r =
        connectExpectingRefusal(options(Role::kAttention, port, 16, 1 << 20), options(Role::kFfn, port, 64, 1 << 20));
    EXPECT_EQ(r.attention.code(), core::StatusCode::kMismatch) << r.attention.toString();
    EXPECT_EQ(core::exitCodeFor(r.attention), core::kExitFailure);
    EXPECT_THAT(r.attention.message(),
                AllOf(HasSubstr("rejected the hello of attention rank 0: frame limits mismatch: max rows per frame: "
                                "attention rank 0 has 16, ffn rank 0 has 64 (from afd.max_num_tokens)"),
                      Not(HasSubstr("payload bytes")), Not(HasSubstr("fingerprint"))));
    EXPECT_EQ(r.ffn.code(), core::StatusCode::kTimeout) << r.ffn.toString();

    // Only the payload bytes differ (e.g. another hidden size at the same max_num_tokens).
    const int port2 = pickFreePort();
    const Refusal b =
        connectExpectingRefusal(options(Role::kAttention, port2, 16, 4096), options(Role::kFfn, port2, 16, 8192));
    EXPECT_EQ(b.attention.code(), core::StatusCode::kMismatch) << b.attention.toString();
    EXPECT_THAT(b.attention.message(),
                AllOf(HasSubstr("frame limits mismatch: max payload bytes per data frame: attention rank 0 has 4096, "
                                "ffn rank 0 has 8192 (from afd.max_num_tokens rows of the widest frame"),
                      Not(HasSubstr("max rows"))));
}

// The rendezvous compares fingerprints before any hello; at the hello itself (here without a rendezvous) one
// answer names every difference.
TEST(TcpFrameLimits, ALimitsAndAFingerprintMismatchAreBothNamedAtTheHello) {
    auto listener = listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listener.isOk()) << listener.status().toString();
    const HostPort endpoint{"127.0.0.1", listener->port};
    const std::vector<int> expected{0};
    const tcp::HandshakeIdentity ffn{Role::kFfn, 0, "model-a | tcp/p2p/1A1F/t16", FrameLimits{16, 1024}};
    auto accepting = runAsync([&] {
        return tcp::acceptPeers(listener->fd.get(), endpoint.toString(), expected, ffn, deadlineAfter(1500ms), nullptr)
            .status();
    });
    const tcp::HandshakeIdentity attention{Role::kAttention, 0, "model-a | tcp/p2p/1A1F/t32", FrameLimits{32, 2048}};
    auto refused = tcp::connectAndHello(endpoint, PeerInfo{Role::kFfn, 0, endpoint.toString()}, attention,
                                        deadlineAfter(10s), nullptr);
    EXPECT_EQ(refused.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(refused.status().message(),
                AllOf(HasSubstr("max rows per frame: attention rank 0 has 32, ffn rank 0 has 16"),
                      HasSubstr("max payload bytes per data frame: attention rank 0 has 2048, ffn rank 0 has 1024"),
                      HasSubstr("; fingerprint mismatch: attention rank 0 has 'model-a | tcp/p2p/1A1F/t32', ffn rank "
                                "0 has 'model-a | tcp/p2p/1A1F/t16'")));
    EXPECT_EQ(accepting.get().code(), core::StatusCode::kTimeout);
}

// A 1 × 1 deployment with equal limits of `max_rows` rows and max_rows F32 rows of kCols columns.
Deployment connectWithLimits(uint32_t max_rows, std::chrono::milliseconds step_timeout) {
    const int port = pickFreePort();
    const size_t bytes = max_rows * kCols * sizeof(float);
    auto attention = options(Role::kAttention, port, max_rows, bytes);
    auto ffn = options(Role::kFfn, port, max_rows, bytes);
    attention.step_timeout = ffn.step_timeout = step_timeout;
    auto d = connectAll({ffn, attention});
    AFD_CHECK(d.isOk(), "{}", d.status().toString());
    return std::move(*d);
}

FramePayload rowsOf(uint32_t rows, int64_t cols, uint64_t seed) {
    return {rows, {makeTensor(core::DType::kF32, rows, cols, seed)}};
}

const FrameSpec kSpec{{{core::DType::kF32, static_cast<uint32_t>(kCols)}}};

TEST(TcpFrameLimits, EqualLimitsConnectAndFramesAtTheLimitPassBothWays) {
    Deployment d = connectWithLimits(8, 20s);
    AttentionConnector& attention = *d.attention[0];
    FfnConnector& ffn = *d.ffn[0];
    StepHeader step;
    step.stage_tokens[0] = 8;
    ASSERT_TRUE(attention.sendStep(step).isOk());
    auto info = ffn.receiveStep();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    EXPECT_EQ(info->peers[0].stage_tokens[0], 8u);
    const FramePayload full = rowsOf(8, kCols, 1);  // exactly max_rows rows and max_frame_bytes bytes
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, std::span(&full, 1)).isOk());
    auto frames = ffn.receive({0, 0, 0}, kSpec);
    ASSERT_TRUE(frames.isOk()) << frames.status().toString();
    EXPECT_EQ(compareTensor((*frames)[0].segments[0], core::DType::kF32, 8, kCols, 1), "");
    const FramePayload reply = rowsOf(8, kCols, 2);
    ASSERT_TRUE(ffn.send({0, 0, 0}, std::span(&reply, 1)).isOk());
    auto back = attention.combine({0, 0, 0}, kSpec);
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(compareTensor((*back)[0].segments[0], core::DType::kF32, 8, kCols, 2), "");
}

TEST(TcpFrameLimits, SenderRefusesFramesOverTheAgreedLimitsAndThePeerIsNotLeftWaiting) {
    Deployment d = connectWithLimits(8, 20s);
    AttentionConnector& attention = *d.attention[0];
    FfnConnector& ffn = *d.ffn[0];

    // A step header announcing more tokens than the FFN accepts is refused by the attention side.
    StepHeader too_many_tokens;
    too_many_tokens.stage_tokens[0] = 9;
    const core::Status step_refused = attention.sendStep(too_many_tokens);
    EXPECT_EQ(step_refused.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(step_refused.message(), AllOf(HasSubstr("9 tokens in stage 0"), HasSubstr("at most 8 tokens"),
                                              HasSubstr("afd.max_num_tokens"), HasSubstr("nothing was sent")));
    StepHeader step;
    step.stage_tokens[0] = 8;
    ASSERT_TRUE(attention.sendStep(step).isOk());
    auto info = ffn.receiveStep();
    ASSERT_TRUE(info.isOk()) << info.status().toString();  // the refused header never reached the FFN
    EXPECT_EQ(info->peers[0].stage_tokens[0], 8u);

    // The FFN waits for the a2f frame while the attention side is refused two frames over the limits.
    auto received = runAsync([&ffn] {
        auto frames = ffn.receive({0, 0, 0}, kSpec);
        if (!frames.isOk()) return frames.status().toString();
        return compareTensor((*frames)[0].segments[0], core::DType::kF32, 3, kCols, 7);
    });
    const FramePayload rows_over = rowsOf(9, kCols, 5);
    const core::Status rows_refused = attention.dispatch({0, 0, 0}, std::span(&rows_over, 1));
    EXPECT_EQ(rows_refused.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(rows_refused.message(),
                AllOf(StartsWith("a2f frame to ffn rank 0 (127.0.0.1:"),
                      HasSubstr("9 rows, at most 8 (the limit agreed with it at the handshake, from "
                                "afd.max_num_tokens); nothing was sent")));
    const FramePayload bytes_over = rowsOf(2, 5 * kCols, 6);  // 160 bytes of a 128-byte limit
    const core::Status bytes_refused = attention.dispatch({0, 0, 0}, std::span(&bytes_over, 1));
    EXPECT_EQ(bytes_refused.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes_refused.message(), HasSubstr("160 payload bytes, at most 128 (the limit agreed with it at the "
                                                   "handshake"));
    EXPECT_EQ(received.wait_for(50ms), std::future_status::timeout);  // still waiting, on a clean stream
    // The next valid frame is the one the FFN receives, at once and intact: no byte of the refused ones went out.
    const FramePayload good = rowsOf(3, kCols, 7);
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, std::span(&good, 1)).isOk());
    ASSERT_EQ(received.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(received.get(), "");

    // The same on the FFN side.
    const core::Status reply_refused = ffn.send({0, 0, 0}, std::span(&rows_over, 1));
    EXPECT_EQ(reply_refused.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(reply_refused.message(),
                AllOf(StartsWith("f2a frame to attention rank 0 (127.0.0.1:"), HasSubstr("9 rows, at most 8")));
    const FramePayload reply = rowsOf(3, kCols, 8);
    ASSERT_TRUE(ffn.send({0, 0, 0}, std::span(&reply, 1)).isOk());
    auto back = attention.combine({0, 0, 0}, kSpec);
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(compareTensor((*back)[0].segments[0], core::DType::kF32, 3, kCols, 8), "");

    // A rank whose send was refused and that gives up closes; its peer learns at once, not at the step timeout.
    ASSERT_TRUE(attention.sendStep(step).isOk());
    ASSERT_TRUE(ffn.receiveStep().isOk());
    ASSERT_TRUE(attention.dispatch({0, 0, 0}, std::span(&good, 1)).isOk());
    ASSERT_TRUE(ffn.receive({0, 0, 0}, kSpec).isOk());
    auto combined = runAsync([&attention] { return attention.combine({0, 0, 0}, kSpec).status(); });
    EXPECT_EQ(ffn.send({0, 0, 0}, std::span(&bytes_over, 1)).code(), core::StatusCode::kInvalidArgument);
    const auto start = Clock::now();
    ffn.close();
    ASSERT_EQ(combined.wait_for(5s), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 2s);
    const core::Status lost = combined.get();
    EXPECT_EQ(lost.code(), core::StatusCode::kPeerLost) << lost.toString();
    EXPECT_THAT(lost.message(), HasSubstr("ffn rank 0 (127.0.0.1:"));
}

// A hand-played FFN rank: reads one hello on `listener`, hands it over, and acknowledges it with `ack_limits`.
core::Result<Hello> answerOneHello(int listener, const FrameLimits& ack_limits) {
    AFD_ASSIGN_OR_RETURN(core::UniqueFd fd, acceptTcp(listener, deadlineAfter(10s), nullptr, "fake ffn listener"));
    HeaderBytes head{};
    AFD_RETURN_IF_ERROR(recvAll(fd.get(), head.data(), head.size(), deadlineAfter(10s), nullptr, "attention"));
    AFD_ASSIGN_OR_RETURN(const FrameHeader header, decodeHeader(head, {}, "attention"));
    if (header.kind != FrameKind::kHello) return core::corrupt("expected a hello, got {}", frameKindName(header.kind));
    std::vector<uint8_t> payload(header.payload_bytes);
    AFD_RETURN_IF_ERROR(recvAll(fd.get(), payload.data(), payload.size(), deadlineAfter(10s), nullptr, "attention"));
    AFD_ASSIGN_OR_RETURN(Hello hello, decodeHelloPayload(payload, "attention"));
    AFD_RETURN_IF_ERROR(sendRaw(fd.get(), encodeHelloAckFrame(ack_limits), 10s));
    // Hold the connection until the attention side has read the ack and decided.
    std::array<uint8_t, 1> rest{};
    (void)recvAll(fd.get(), rest.data(), rest.size(), deadlineAfter(10s), nullptr, "attention");
    return hello;
}

TEST(TcpFrameLimits, HelloCarriesTheLimitsAndAttentionRefusesAnAckWithOthers) {
    auto listener = listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listener.isOk()) << listener.status().toString();
    const HostPort endpoint{"127.0.0.1", listener->port};
    const PeerInfo ffn_peer{Role::kFfn, 0, endpoint.toString()};
    const tcp::HandshakeIdentity self{Role::kAttention, 2, "fp", FrameLimits{16, 4096}};

    // An FFN that acknowledges with the same limits: connected, and the hello carried this rank's limits.
    auto same = runAsync([&] { return answerOneHello(listener->fd.get(), {16, 4096}); });
    auto connected = tcp::connectAndHello(endpoint, ffn_peer, self, deadlineAfter(10s), nullptr);
    ASSERT_TRUE(connected.isOk()) << connected.status().toString();
    connected->reset();
    auto hello = same.get();
    ASSERT_TRUE(hello.isOk()) << hello.status().toString();
    EXPECT_EQ(hello->rank, 2);
    EXPECT_EQ(hello->fingerprint, "fp");
    EXPECT_EQ(hello->limits, (FrameLimits{16, 4096}));

    // One that acknowledges with other limits (an FFN that skipped the check): refused, naming both values.
    auto other = runAsync([&] { return answerOneHello(listener->fd.get(), {8, 4096}).status(); });
    auto refused = tcp::connectAndHello(endpoint, ffn_peer, self, deadlineAfter(10s), nullptr);
    EXPECT_EQ(refused.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(refused.status().message(),
                HasSubstr(fmt::format("ffn rank 0 ({}) acknowledged the hello of attention rank 2, but: frame limits "
                                      "mismatch: max rows per frame: ffn rank 0 has 8, attention rank 2 has 16 (from "
                                      "afd.max_num_tokens)",
                                      endpoint.toString())));
    EXPECT_TRUE(other.get().isOk());
}

}  // namespace
}  // namespace afd::transport
