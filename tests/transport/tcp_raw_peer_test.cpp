// A real connector on one side, a hand-driven peer on the other: corrupt and unexpected frames, truncation,
// silence, and a peer that writes a large frame without reading (the write-write case).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "transport/tcp/tcp_connector.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;
using namespace afd::transport::testing;

constexpr uint32_t kCols = 8;
constexpr uint32_t kMaxRows = 16;
const FrameSpec kSpec{{{core::DType::kF32, kCols}}};

// One real FFN rank; attention rank `raw_rank` is a raw peer, the others (if any) real connectors.
struct FfnUnderTest {
    std::unique_ptr<FfnConnector> ffn;
    std::vector<std::unique_ptr<AttentionConnector>> attention;  // by rank; null for the raw one
    RawAttentionPeer raw;
};

FfnUnderTest startFfn(int num_attention, int raw_rank, std::chrono::milliseconds step_timeout = 20s) {
    const int port = pickFreePort();
    auto ffn_options = baseOptions(Role::kFfn, 0, num_attention, 1, port);
    ffn_options.peers = allRanks(num_attention);
    ffn_options.max_rows = kMaxRows;
    ffn_options.max_frame_bytes = kMaxRows * kSpec.rowBytes();
    ffn_options.step_timeout = step_timeout;
    auto ffn = runAsync([ffn_options] { return tcp::createFfnConnector(ffn_options); });
    std::vector<std::future<core::Result<std::unique_ptr<AttentionConnector>>>> others;
    for (int a = 0; a < num_attention; ++a) {
        if (a == raw_rank) continue;
        auto o = baseOptions(Role::kAttention, a, num_attention, 1, port);
        o.peers = {0};
        o.max_rows = kMaxRows;
        o.max_frame_bytes = ffn_options.max_frame_bytes;
        others.push_back(runAsync([o] { return tcp::createAttentionConnector(o); }));
    }
    FfnUnderTest t;
    // The raw peer announces the FFN's limits, as a conforming rank would, and breaks the rules only afterwards.
    auto raw_options = baseOptions(Role::kAttention, raw_rank, num_attention, 1, port);
    raw_options.max_rows = ffn_options.max_rows;
    raw_options.max_frame_bytes = ffn_options.max_frame_bytes;
    auto raw = connectRawAttention(raw_options, 0);
    AFD_CHECK(raw.isOk(), "raw attention peer: {}", raw.status().toString());
    t.raw = std::move(*raw);
    auto connector = ffn.get();
    AFD_CHECK(connector.isOk(), "ffn connector: {}", connector.status().toString());
    t.ffn = std::move(*connector);
    t.attention.resize(num_attention);
    size_t next = 0;
    for (int a = 0; a < num_attention; ++a) {
        if (a == raw_rank) continue;
        auto c = others[next++].get();
        AFD_CHECK(c.isOk(), "attention connector: {}", c.status().toString());
        t.attention[a] = std::move(*c);
    }
    return t;
}

StepHeader stepHeader(uint64_t step) {
    StepHeader h;
    h.step = step;
    h.stage_tokens[0] = 2;
    return h;
}

// Sends a valid step header from the raw peer and has the FFN accept it.
void startStep(FfnUnderTest& t, uint64_t step) {
    ASSERT_TRUE(t.raw.sendBytes(encodeStepFrame(stepHeader(step)).data(), kFrameHeaderBytes).isOk());
    auto info = t.ffn->receiveStep();
    ASSERT_TRUE(info.isOk()) << info.status().toString();
    ASSERT_EQ(info->step, step);
}

core::Status receiveLayer4(FfnUnderTest& t) { return t.ffn->receive({5, 4, 0}, kSpec).status(); }

void expectPeerDropped(FfnUnderTest& t, const core::Status& first) {
    // The error sticks; further calls neither hang nor crash, and close() is clean.
    EXPECT_EQ(t.ffn->receiveStep().status().code(), first.code());
    t.ffn->close();
}

TEST(TcpRawPeer, BadMagicDropsThePeer) {
    FfnUnderTest t = startFfn(1, 0);
    std::vector<uint8_t> garbage(kFrameHeaderBytes, 'X');
    ASSERT_TRUE(t.raw.sendBytes(garbage.data(), garbage.size()).isOk());
    const core::Status s = t.ffn->receiveStep().status();
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), AllOf(StartsWith("attention rank 0 (127.0.0.1:"), HasSubstr("bad frame magic")));
    expectPeerDropped(t, s);
}

TEST(TcpRawPeer, BadMagicFromOnePeerOfTwoNamesThatPeer) {
    FfnUnderTest t = startFfn(2, 1);
    ASSERT_TRUE(t.attention[0]->sendStep(stepHeader(0)).isOk());
    std::vector<uint8_t> garbage(kFrameHeaderBytes, 0);
    ASSERT_TRUE(t.raw.sendBytes(garbage.data(), garbage.size()).isOk());
    const core::Status s = t.ffn->receiveStep().status();
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), StartsWith("attention rank 1 (127.0.0.1:"));
    expectPeerDropped(t, s);
}

TEST(TcpRawPeer, WrongLayerIsAMismatchNamingPeerAndField) {
    FfnUnderTest t = startFfn(1, 0);
    startStep(t, 5);
    const auto frame = encodeDataFrame(FrameKind::kA2f, {5, 5, 0}, 2, {makeTensor(core::DType::kF32, 2, kCols, 1)});
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), frame.size()).isOk());
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_THAT(s.message(), AllOf(StartsWith("attention rank 0 (127.0.0.1:"),
                                   HasSubstr("): a2f frame for layer 5 stage 0, expected layer 4")));
    expectPeerDropped(t, s);
}

TEST(TcpRawPeer, TooManyRowsIsCorrupt) {
    FfnUnderTest t = startFfn(1, 0);
    startStep(t, 5);
    const auto frame = encodeDataFrame(FrameKind::kA2f, {5, 4, 0}, kMaxRows + 1,
                                       {makeTensor(core::DType::kF32, kMaxRows + 1, kCols, 1)});
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), frame.size()).isOk());
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), HasSubstr("17 rows, at most 16"));
    expectPeerDropped(t, s);
}

// A valid 2-row frame whose only descriptor is rewritten to `cols`.
std::vector<uint8_t> frameWithCols(uint32_t cols, uint64_t payload_bytes) {
    auto frame = encodeDataFrame(FrameKind::kA2f, {5, 4, 0}, 2, {makeTensor(core::DType::kF32, 2, kCols, 1)});
    std::memcpy(&frame[kFrameHeaderBytes + 4], &cols, 4);
    std::memcpy(&frame[32], &payload_bytes, 8);
    return frame;
}

TEST(TcpRawPeer, OversizedSegmentIsCorrupt) {
    FfnUnderTest t = startFfn(1, 0);
    startStep(t, 5);
    // The header's payload is within the limit, the segment claims far more.
    const auto frame = frameWithCols(1000000, 2 * kCols * 4);
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), frame.size()).isOk());
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), HasSubstr("segment 0 of [2, 1000000] F32 exceeds the frame's 64 payload bytes"));
    expectPeerDropped(t, s);
}

TEST(TcpRawPeer, PayloadBeyondTheReceiversLimitIsCorrupt) {
    FfnUnderTest t = startFfn(1, 0);
    startStep(t, 5);
    const auto frame = frameWithCols(1000000, 2ull * 1000000 * 4);
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), kFrameHeaderBytes).isOk());
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), HasSubstr("8000000 payload bytes, at most 512"));
    expectPeerDropped(t, s);
}

TEST(TcpRawPeer, SegmentOfAnotherDtypeIsAMismatch) {
    FfnUnderTest t = startFfn(1, 0);
    startStep(t, 5);
    const auto frame = encodeDataFrame(FrameKind::kA2f, {5, 4, 0}, 2, {makeTensor(core::DType::kI32, 2, kCols, 1)});
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), frame.size()).isOk());
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_THAT(s.message(), HasSubstr("segment 0 is I32, expected F32"));
}

TEST(TcpRawPeer, TruncatedFrameThenCloseIsPeerLost) {
    for (const size_t cut : {size_t{30}, kFrameHeaderBytes + kSegmentDescriptorBytes + 20}) {
        FfnUnderTest t = startFfn(1, 0);
        startStep(t, 5);
        const auto frame = encodeDataFrame(FrameKind::kA2f, {5, 4, 0}, 2, {makeTensor(core::DType::kF32, 2, kCols, 1)});
        ASSERT_LT(cut, frame.size());
        ASSERT_TRUE(t.raw.sendBytes(frame.data(), cut).isOk());
        t.raw.fd.reset();
        const core::Status s = receiveLayer4(t);
        EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
        EXPECT_THAT(s.message(), AllOf(StartsWith("attention rank 0 (127.0.0.1:"),
                                       HasSubstr(fmt::format("in the middle of a frame ({} bytes of it", cut))));
        expectPeerDropped(t, s);
    }
}

TEST(TcpRawPeer, SilentPeerMidFrameHitsTheStepTimeout) {
    FfnUnderTest t = startFfn(1, 0, 300ms);
    startStep(t, 5);
    const auto frame = encodeDataFrame(FrameKind::kA2f, {5, 4, 0}, 2, {makeTensor(core::DType::kF32, 2, kCols, 1)});
    ASSERT_TRUE(t.raw.sendBytes(frame.data(), frame.size() / 2).isOk());
    const auto start = Clock::now();
    const core::Status s = receiveLayer4(t);
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("waiting for a2f frames of step 5 layer 4 stage 0: timed out after"),
                                   HasSubstr("waiting on attention rank 0 (127.0.0.1:")));
    EXPECT_GE(Clock::now() - start, 300ms);
}

// ---- a raw FFN peer facing a real attention connector ----

struct AttentionUnderTest {
    std::unique_ptr<AttentionConnector> attention;
    RawFfnPeer raw;
};

AttentionUnderTest startAttention(uint32_t max_rows, size_t max_frame_bytes, int socket_buffer_bytes,
                                  std::chrono::milliseconds step_timeout = 20s) {
    const int port = pickFreePort();
    auto o = baseOptions(Role::kAttention, 0, 1, 1, port);
    o.peers = {0};
    o.max_rows = max_rows;
    o.max_frame_bytes = max_frame_bytes;
    o.step_timeout = step_timeout;
    auto attention = runAsync([o] { return tcp::createAttentionConnector(o); });
    auto raw_options = baseOptions(Role::kFfn, 0, 1, 1, port);  // announces the attention rank's limits
    raw_options.max_rows = max_rows;
    raw_options.max_frame_bytes = max_frame_bytes;
    auto raw = acceptRawFfn(raw_options, socket_buffer_bytes);
    AFD_CHECK(raw.isOk(), "raw ffn: {}", raw.status().toString());
    auto connector = attention.get();
    AFD_CHECK(connector.isOk(), "attention connector: {}", connector.status().toString());
    return {std::move(*connector), std::move(*raw)};
}

TEST(TcpRawPeer, AttentionDrainsRepliesWhileItWritesSoAPeerThatWritesFirstCannotDeadlockIt) {
    // The peer's sockets hold 64 KiB; the frames are 8 MiB. The peer answers stage 0 with a blocking write of
    // its whole F2A frame before it reads stage 1, while attention is writing stage 1: only an attention side
    // that reads during its dispatch lets both writes finish.
    constexpr uint32_t kRows = 2048, kHidden = 1024;
    const FrameSpec spec{{{core::DType::kF32, kHidden}}};
    AttentionUnderTest t = startAttention(kRows, kRows * spec.rowBytes(), 64 << 10, 30s);
    const int fd = t.raw.fds[0].get();
    auto peer = runAsync([fd]() -> std::string {
        auto step = recvRawFrame(fd, 30s);
        if (!step.isOk() || step->header.kind != FrameKind::kStep) return "no step header";
        for (uint32_t stage = 0; stage < 2; ++stage) {
            auto a2f = recvRawFrame(fd, 30s);
            if (!a2f.isOk()) return "a2f: " + a2f.status().toString();
            if (a2f->header.stage != stage || a2f->header.rows != kRows) return "a2f: wrong frame";
            const auto reply = encodeDataFrame(FrameKind::kF2a, {0, 3, stage}, kRows,
                                               {makeTensor(core::DType::kF32, kRows, kHidden, 50 + stage)});
            if (core::Status s = sendRaw(fd, reply, 30s); !s.isOk()) return "f2a: " + s.toString();
        }
        return "";
    });
    StepHeader header;
    header.num_stages = 2;
    ASSERT_TRUE(t.attention->sendStep(header).isOk());
    for (uint32_t stage = 0; stage < 2; ++stage) {
        FramePayload payload{kRows, {makeTensor(core::DType::kF32, kRows, kHidden, 10 + stage)}};
        const core::Status s = t.attention->dispatch({0, 3, stage}, std::span(&payload, 1));
        ASSERT_TRUE(s.isOk()) << s.toString();
    }
    for (uint32_t stage = 0; stage < 2; ++stage) {
        auto frames = t.attention->combine({0, 3, stage}, spec);
        ASSERT_TRUE(frames.isOk()) << frames.status().toString();
        EXPECT_EQ(compareTensor((*frames)[0].segments[0], core::DType::kF32, kRows, kHidden, 50 + stage), "");
    }
    EXPECT_EQ(peer.get(), "");
}

TEST(TcpRawPeer, ReplyForAnotherLayerIsAMismatchNamingTheFfnPeer) {
    AttentionUnderTest t = startAttention(kMaxRows, kMaxRows * kSpec.rowBytes(), 0);
    ASSERT_TRUE(t.attention->sendStep(stepHeader(1)).isOk());
    FramePayload payload{2, {makeTensor(core::DType::kF32, 2, kCols, 3)}};
    ASSERT_TRUE(t.attention->dispatch({1, 4, 0}, std::span(&payload, 1)).isOk());
    const int fd = t.raw.fds[0].get();
    ASSERT_TRUE(recvRawFrame(fd, 10s).isOk());  // step
    ASSERT_TRUE(recvRawFrame(fd, 10s).isOk());  // a2f
    ASSERT_TRUE(
        sendRaw(fd, encodeDataFrame(FrameKind::kF2a, {1, 9, 0}, 2, {makeTensor(core::DType::kF32, 2, kCols, 4)}), 10s)
            .isOk());
    const core::Status s = t.attention->combine({1, 4, 0}, kSpec).status();
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_THAT(s.message(), AllOf(StartsWith("ffn rank 0 (127.0.0.1:"),
                                   HasSubstr("f2a frame for layer 9 stage 0, expected layer 4")));
    EXPECT_EQ(t.attention->sendStep(stepHeader(2)).code(), core::StatusCode::kMismatch);
}

TEST(TcpRawPeer, FrameNobodyAskedForIsReportedAtOnce) {
    AttentionUnderTest t = startAttention(kMaxRows, kMaxRows * kSpec.rowBytes(), 0);
    const int fd = t.raw.fds[0].get();
    ASSERT_TRUE(
        sendRaw(fd, encodeDataFrame(FrameKind::kF2a, {0, 0, 0}, 1, {makeTensor(core::DType::kF32, 1, kCols, 4)}), 10s)
            .isOk());
    const core::Status s = t.attention->sendStep(stepHeader(0));
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(s.message(), HasSubstr("unexpected f2a frame (step 0 layer 0 stage 0) while no frame was due"));
}

TEST(TcpRawPeer, ReplyWithTheWrongSegmentsFailsTheCombine) {
    AttentionUnderTest t = startAttention(kMaxRows, kMaxRows * kSpec.rowBytes(), 0);
    ASSERT_TRUE(t.attention->sendStep(stepHeader(1)).isOk());
    FramePayload payload{2, {makeTensor(core::DType::kF32, 2, kCols, 3)}};
    ASSERT_TRUE(t.attention->dispatch({1, 4, 0}, std::span(&payload, 1)).isOk());
    const int fd = t.raw.fds[0].get();
    ASSERT_TRUE(recvRawFrame(fd, 10s).isOk());
    ASSERT_TRUE(recvRawFrame(fd, 10s).isOk());
    ASSERT_TRUE(
        sendRaw(fd, encodeDataFrame(FrameKind::kF2a, {1, 4, 0}, 2, {makeTensor(core::DType::kF32, 2, 4, 4)}), 10s)
            .isOk());
    const core::Status s = t.attention->combine({1, 4, 0}, kSpec).status();
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_THAT(s.message(), HasSubstr("segment 0 has 4 cols, expected 8"));
}

}  // namespace
}  // namespace afd::transport
