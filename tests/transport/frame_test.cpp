#include "transport/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <vector>

#include "transport/afd_wire.h"

namespace afd::transport {
namespace {

using ::testing::HasSubstr;

constexpr FrameLimits kLimits{16, 4096};
constexpr std::string_view kPeer = "attention rank 1 (127.0.0.1:40122)";

core::Result<FrameHeader> decode(const HeaderBytes& bytes) { return decodeHeader(bytes, kLimits, kPeer); }

uint32_t readU32(const HeaderBytes& b, size_t at) {
    return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

TEST(Frame, HeaderBytesAreLittleEndianAtFixedOffsets) {
    FrameHeader h;
    h.kind = FrameKind::kA2f;
    h.segment_count = 3;
    h.step = 0x0102030405060708ull;
    h.layer = 7;
    h.stage = 1;
    h.rows = 5;
    h.payload_bytes = 600;
    const HeaderBytes b = encodeHeader(h);
    EXPECT_EQ(b[0], 'A');
    EXPECT_EQ(b[1], 'F');
    EXPECT_EQ(b[2], 'D');
    EXPECT_EQ(b[3], 'F');
    EXPECT_EQ(b[4] | (b[5] << 8), kProtocolVersion);
    EXPECT_EQ(b[6], 2);
    EXPECT_EQ(b[7], 3);
    EXPECT_EQ(b[8], 0x08);
    EXPECT_EQ(b[15], 0x01);
    EXPECT_EQ(readU32(b, 16), 7u);
    EXPECT_EQ(readU32(b, 20), 1u);
    EXPECT_EQ(readU32(b, 24), 5u);
    EXPECT_EQ(readU32(b, 32), 600u);
}

TEST(Frame, StepHeaderRoundTrips) {
    StepHeader step;
    step.step = 42;
    step.flags = kStepWarmup | kStepCapture;
    step.num_stages = 2;
    step.stage_tokens = {7, 9};
    core::Result<FrameHeader> h = decode(encodeHeader(makeStepHeader(step)));
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    EXPECT_EQ(h->kind, FrameKind::kStep);
    EXPECT_EQ(h->step, 42u);
    EXPECT_EQ(h->flags, kStepWarmup | kStepCapture);
    EXPECT_EQ(h->stage, 2u);
    EXPECT_EQ(h->stage_tokens[0], 7u);
    EXPECT_EQ(h->stage_tokens[1], 9u);
    EXPECT_EQ(stepFlagsToString(h->flags), "warmup|capture");
    EXPECT_EQ(stepFlagsToString(0), "none");
}

TEST(Frame, DataHeaderAndSegmentsRoundTrip) {
    const std::vector<SegmentSpec> specs = {{core::DType::kBf16, 3}, {core::DType::kI32, 2}, {core::DType::kF32, 2}};
    const FrameHeader header = makeDataHeader(FrameKind::kA2f, {9, 4, 1}, 5, specs);
    EXPECT_EQ(header.payload_bytes, 5u * (3 * 2 + 2 * 4 + 2 * 4));
    core::Result<FrameHeader> h = decode(encodeHeader(header));
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    EXPECT_TRUE(checkDataFrameKey(*h, FrameKind::kA2f, {9, 4, 1}, kPeer).isOk());

    std::vector<uint8_t> descriptors(specs.size() * kSegmentDescriptorBytes);
    for (size_t i = 0; i < specs.size(); ++i) encodeDescriptor(specs[i], &descriptors[i * kSegmentDescriptorBytes]);
    core::Result<SegmentLayout> layout = decodeSegments(*h, descriptors, kPeer);
    ASSERT_TRUE(layout.isOk()) << layout.status().toString();
    ASSERT_EQ(layout->count, 3u);
    EXPECT_EQ(layout->segments[0], specs[0]);
    EXPECT_EQ(layout->bytes[0], 30u);
    EXPECT_EQ(layout->offsets[0], 0u);
    EXPECT_EQ(layout->offsets[1], 64u);  // aligned: 30 bytes round up to one 64-byte line
    EXPECT_EQ(layout->offsets[2], 128u);
    EXPECT_LE(layout->extent(), receiveBufferBytes(kLimits));
    FrameSpec spec{specs};
    EXPECT_TRUE(checkSegments(*h, *layout, spec, kPeer).isOk());
    EXPECT_EQ(spec.rowBytes(), 22u);
}

TEST(Frame, RejectsBadMagic) {
    HeaderBytes b = encodeHeader(makeStepHeader({}));
    b[0] ^= 0xff;
    core::Result<FrameHeader> h = decode(b);
    EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(h.status().message(), HasSubstr("bad frame magic"));
    EXPECT_THAT(h.status().message(), HasSubstr(std::string(kPeer)));
}

TEST(Frame, RejectsAnotherProtocolVersionNamingBoth) {
    FrameHeader header = makeStepHeader({});
    header.version = kProtocolVersion + 1;
    core::Result<FrameHeader> h = decode(encodeHeader(header));
    EXPECT_EQ(h.status().code(), core::StatusCode::kMismatch);
    EXPECT_THAT(h.status().message(), HasSubstr(fmt::format("version {}", kProtocolVersion + 1)));
    EXPECT_THAT(h.status().message(), HasSubstr(fmt::format("speaks version {}", kProtocolVersion)));
}

TEST(Frame, RejectsUnknownKind) {
    HeaderBytes b = encodeHeader(makeStepHeader({}));
    b[6] = 99;
    EXPECT_EQ(decode(b).status().code(), core::StatusCode::kCorrupt);
    b[6] = 0;
    EXPECT_EQ(decode(b).status().code(), core::StatusCode::kCorrupt);
}

TEST(Frame, RejectsStepHeaderWithMoreThanTwoStages) {
    FrameHeader header = makeStepHeader({});
    header.stage = 3;
    core::Result<FrameHeader> h = decode(encodeHeader(header));
    EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(h.status().message(), HasSubstr("3 stages"));
    header.stage = 0;
    EXPECT_EQ(decode(encodeHeader(header)).status().code(), core::StatusCode::kCorrupt);
}

TEST(Frame, RejectsStepHeaderFlagsAndCounts) {
    FrameHeader header = makeStepHeader({});
    header.flags = 1u << 20;
    EXPECT_THAT(decode(encodeHeader(header)).status().message(), HasSubstr("unknown flags"));

    header = makeStepHeader({});
    header.stage_tokens[0] = kLimits.max_rows + 1;
    core::Result<FrameHeader> h = decode(encodeHeader(header));
    EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(h.status().message(), HasSubstr("17 tokens in stage 0, at most 16"));

    header = makeStepHeader({});  // one stage
    header.stage_tokens[1] = 1;
    EXPECT_THAT(decode(encodeHeader(header)).status().message(), HasSubstr("unused stage 1"));

    header = makeStepHeader({});
    header.payload_bytes = 8;
    EXPECT_EQ(decode(encodeHeader(header)).status().code(), core::StatusCode::kCorrupt);

    header = makeStepHeader({});
    header.layer = 5;
    EXPECT_THAT(decode(encodeHeader(header)).status().message(), HasSubstr("layer 5 set, expected 0"));
}

// Hello, hello_ack and error frames use no step field; a set one is refused, naming the kind.
TEST(Frame, RejectsControlFramesWithStepFields) {
    for (const FrameKind kind : {FrameKind::kHello, FrameKind::kHelloAck, FrameKind::kError}) {
        SCOPED_TRACE(std::string(frameKindName(kind)));
        FrameHeader clean;
        clean.kind = kind;
        if (kind == FrameKind::kHelloAck) clean.payload_bytes = kHelloAckPayloadBytes;
        ASSERT_TRUE(decode(encodeHeader(clean)).isOk());
        for (int field = 0; field < 5; ++field) {
            FrameHeader header = clean;
            switch (field) {
                case 0:
                    header.step = 7;
                    break;
                case 1:
                    header.layer = 2;
                    break;
                case 2:
                    header.stage = 1;
                    break;
                case 3:
                    header.flags = kStepWarmup;
                    break;
                default:
                    header.stage_tokens[1] = 3;
                    break;
            }
            core::Result<FrameHeader> h = decode(encodeHeader(header));
            EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt) << "field " << field;
            EXPECT_THAT(h.status().message(), HasSubstr("step fields set")) << "field " << field;
        }
    }
}

TEST(Frame, RejectsDataFrameBeyondLimits) {
    const std::vector<SegmentSpec> specs = {{core::DType::kF32, 4}};
    FrameHeader header = makeDataHeader(FrameKind::kA2f, {1, 2, 0}, kLimits.max_rows + 1, specs);
    core::Result<FrameHeader> h = decode(encodeHeader(header));
    EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(h.status().message(), HasSubstr("17 rows, at most 16"));

    header = makeDataHeader(FrameKind::kA2f, {1, 2, 0}, 4, specs);
    header.payload_bytes = kLimits.max_frame_bytes + 1;
    h = decode(encodeHeader(header));
    EXPECT_EQ(h.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(h.status().message(), HasSubstr("4097 payload bytes, at most 4096"));

    header = makeDataHeader(FrameKind::kA2f, {1, 2, 0}, 4, specs);
    header.segment_count = kMaxSegments + 1;
    EXPECT_THAT(decode(encodeHeader(header)).status().message(), HasSubstr("segments, at most"));

    header = makeDataHeader(FrameKind::kA2f, {1, 2, 2}, 4, specs);
    EXPECT_THAT(decode(encodeHeader(header)).status().message(), HasSubstr("stage 2"));
}

TEST(Frame, KeyMismatchNamesPeerAndField) {
    const std::vector<SegmentSpec> specs = {{core::DType::kF32, 4}};
    const FrameHeader header = makeDataHeader(FrameKind::kA2f, {3, 5, 0}, 1, specs);
    core::Status s = checkDataFrameKey(header, FrameKind::kA2f, {3, 4, 0}, kPeer);
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_EQ(s.message(), "attention rank 1 (127.0.0.1:40122): a2f frame for layer 5 stage 0, expected layer 4");
    EXPECT_THAT(checkDataFrameKey(header, FrameKind::kA2f, {4, 5, 0}, kPeer).message(),
                HasSubstr("for step 3, expected step 4"));
    EXPECT_THAT(checkDataFrameKey(header, FrameKind::kA2f, {3, 5, 1}, kPeer).message(), HasSubstr("expected stage 1"));
    EXPECT_THAT(checkDataFrameKey(header, FrameKind::kF2a, {3, 5, 0}, kPeer).message(),
                HasSubstr("a2f frame for layer 5 stage 0, expected an f2a frame"));
}

std::vector<uint8_t> descriptorBytes(uint8_t code, uint32_t cols) {
    std::vector<uint8_t> d(kSegmentDescriptorBytes, 0);
    d[0] = code;
    d[4] = static_cast<uint8_t>(cols);
    d[5] = static_cast<uint8_t>(cols >> 8);
    d[6] = static_cast<uint8_t>(cols >> 16);
    d[7] = static_cast<uint8_t>(cols >> 24);
    return d;
}

TEST(Frame, RejectsMalformedSegments) {
    const std::vector<SegmentSpec> specs = {{core::DType::kF32, 4}};
    const FrameHeader header = makeDataHeader(FrameKind::kF2a, {1, 1, 0}, 2, specs);  // 32 payload bytes

    core::Result<SegmentLayout> layout = decodeSegments(header, descriptorBytes(200, 4), kPeer);
    EXPECT_EQ(layout.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(layout.status().message(), HasSubstr("unknown dtype code 200"));

    EXPECT_THAT(decodeSegments(header, descriptorBytes(12, 0), kPeer).status().message(), HasSubstr("malformed"));

    // A segment larger than the whole frame: [2, 1000000] f32 in a 32-byte payload.
    layout = decodeSegments(header, descriptorBytes(12, 1000000), kPeer);
    EXPECT_EQ(layout.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(layout.status().message(), HasSubstr("exceeds the frame's 32 payload bytes"));

    // A segment smaller than the payload says.
    layout = decodeSegments(header, descriptorBytes(12, 2), kPeer);
    EXPECT_THAT(layout.status().message(), HasSubstr("add up to 16 bytes, the header says 32"));
}

TEST(Frame, SegmentSizesCannotWrapAroundPastThePayload) {
    // Limits wide enough for a payload above 2^63 (the widest whose receive buffer size is representable).
    const FrameLimits wide{std::numeric_limits<uint32_t>::max(),
                           std::numeric_limits<size_t>::max() - receiveBufferBytes({0, 0})};
    FrameHeader header;
    header.kind = FrameKind::kA2f;
    header.segment_count = 3;
    header.rows = 1u << 31;
    header.payload_bytes = uint64_t{3} << 62;
    core::Result<FrameHeader> h = decodeHeader(encodeHeader(header), wide, kPeer);
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    // F64 segments of 3 × 2^62, 3 × 2^62 and 2^62 bytes: 7 × 2^62 in all, which wraps around 2^64 to exactly the
    // 3 × 2^62 the header declares. Such a layout used to be accepted, its segments reaching far past any buffer.
    std::vector<uint8_t> d(3 * kSegmentDescriptorBytes);
    encodeDescriptor({core::DType::kF64, 3u << 28}, &d[0]);
    encodeDescriptor({core::DType::kF64, 3u << 28}, &d[kSegmentDescriptorBytes]);
    encodeDescriptor({core::DType::kF64, 1u << 28}, &d[2 * kSegmentDescriptorBytes]);
    core::Result<SegmentLayout> layout = decodeSegments(*h, d, kPeer);
    EXPECT_EQ(layout.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(layout.status().message(),
                HasSubstr("segments add up to more than the frame's 13835058055282163712 payload bytes"));
}

TEST(Frame, SegmentsMismatchTheReceiversSpec) {
    const std::vector<SegmentSpec> sent = {{core::DType::kF32, 4}, {core::DType::kI32, 2}};
    const FrameHeader header = makeDataHeader(FrameKind::kA2f, {1, 1, 0}, 2, sent);
    std::vector<uint8_t> d(2 * kSegmentDescriptorBytes);
    encodeDescriptor(sent[0], &d[0]);
    encodeDescriptor(sent[1], &d[kSegmentDescriptorBytes]);
    core::Result<SegmentLayout> layout = decodeSegments(header, d, kPeer);
    ASSERT_TRUE(layout.isOk());
    EXPECT_THAT(checkSegments(header, *layout, FrameSpec{{sent[0]}}, kPeer).message(),
                HasSubstr("2 segments, expected 1"));
    EXPECT_THAT(checkSegments(header, *layout, FrameSpec{{sent[0], {core::DType::kF32, 2}}}, kPeer).message(),
                HasSubstr("segment 1 is I32, expected F32"));
    EXPECT_THAT(checkSegments(header, *layout, FrameSpec{{{core::DType::kF32, 8}, sent[1]}}, kPeer).message(),
                HasSubstr("segment 0 has 4 cols, expected 8"));
}

TEST(Frame, ZeroRowFrameHasNoPayload) {
    const std::vector<SegmentSpec> specs = {{core::DType::kF32, 2048}};
    const FrameHeader header = makeDataHeader(FrameKind::kA2f, {1, 1, 0}, 0, specs);
    EXPECT_EQ(header.payload_bytes, 0u);
    std::vector<uint8_t> d(kSegmentDescriptorBytes);
    encodeDescriptor(specs[0], d.data());
    core::Result<SegmentLayout> layout = decodeSegments(header, d, kPeer);
    ASSERT_TRUE(layout.isOk());
    EXPECT_EQ(layout->bytes[0], 0u);
    EXPECT_EQ(layout->extent(), 0u);
}

TEST(Frame, HelloRoundTripsAndRejectsGarbage) {
    const std::vector<uint8_t> frame = encodeHelloFrame(Role::kAttention, 3, "abc123", {16, (size_t{1} << 40) + 7});
    ASSERT_GE(frame.size(), kFrameHeaderBytes);
    core::Result<FrameHeader> h =
        decodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes), {}, kPeer);
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    EXPECT_EQ(h->kind, FrameKind::kHello);
    ASSERT_EQ(frame.size(), kFrameHeaderBytes + h->payload_bytes);
    core::Result<Hello> hello =
        decodeHelloPayload(std::span(frame.data() + kFrameHeaderBytes, h->payload_bytes), kPeer);
    ASSERT_TRUE(hello.isOk()) << hello.status().toString();
    EXPECT_EQ(hello->role, Role::kAttention);
    EXPECT_EQ(hello->rank, 3);
    EXPECT_EQ(hello->fingerprint, "abc123");
    EXPECT_EQ(hello->limits, (FrameLimits{16, (size_t{1} << 40) + 7}));

    std::vector<uint8_t> bad(frame.begin() + kFrameHeaderBytes, frame.end());
    bad[0] = 9;
    EXPECT_THAT(decodeHelloPayload(bad, kPeer).status().message(), HasSubstr("unknown role code 9"));
    EXPECT_EQ(decodeHelloPayload(std::span(bad.data(), 3), kPeer).status().code(), core::StatusCode::kCorrupt);
    std::vector<uint8_t> padded(frame.begin() + kFrameHeaderBytes, frame.end());
    padded[2] = 1;
    EXPECT_THAT(decodeHelloPayload(padded, kPeer).status().message(), HasSubstr("nonzero padding"));

    FrameHeader big;
    big.kind = FrameKind::kError;
    big.payload_bytes = kMaxControlPayloadBytes + 1;
    EXPECT_EQ(decode(encodeHeader(big)).status().code(), core::StatusCode::kCorrupt);
}

// The hello_ack carries the FFN's limits in exactly kHelloAckPayloadBytes; a version-1 ack (no payload) or a longer
// one is refused.
TEST(Frame, HelloAckCarriesTheLimitsAndNothingElse) {
    const FrameLimits limits{8192, size_t{8192} * 8256};
    const std::vector<uint8_t> frame = encodeHelloAckFrame(limits);
    ASSERT_EQ(frame.size(), kFrameHeaderBytes + kHelloAckPayloadBytes);
    core::Result<FrameHeader> h =
        decodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes), {}, kPeer);
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    EXPECT_EQ(h->kind, FrameKind::kHelloAck);
    EXPECT_EQ(h->payload_bytes, kHelloAckPayloadBytes);
    core::Result<FrameLimits> decoded = decodeHelloAckPayload(std::span(frame).subspan(kFrameHeaderBytes), kPeer);
    ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
    EXPECT_EQ(*decoded, limits);

    for (const uint64_t bytes : {uint64_t{0}, uint64_t{kHelloAckPayloadBytes + 1}}) {
        FrameHeader ack;
        ack.kind = FrameKind::kHelloAck;
        ack.payload_bytes = bytes;
        const core::Status s = decode(encodeHeader(ack)).status();
        EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
        EXPECT_THAT(s.message(), HasSubstr(fmt::format("hello_ack frame with a payload of {} bytes, expected {}", bytes,
                                                       kHelloAckPayloadBytes)));
    }
    EXPECT_EQ(decodeHelloAckPayload(std::span(frame).subspan(kFrameHeaderBytes, 11), kPeer).status().code(),
              core::StatusCode::kCorrupt);
}

TEST(Frame, FuzzSeedCorpusDecodes) {
    // The seeds start the fuzzer from frames a receiver accepts, under the limits the fuzz target uses first (an
    // FFN rank of Qwen3-30B-A3B in m2n at 8192 tokens); a rejected seed would only explore error paths.
    const FrameLimits limits{8192, m2nDispatchSpec(2048, 8).rowBytes() * 8192};
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/frame";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        std::ifstream in(entry.path(), std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ++seeds;
        ASSERT_GE(bytes.size(), kFrameHeaderBytes) << name;
        const auto h =
            decodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(bytes.data(), kFrameHeaderBytes), limits, name);
        ASSERT_TRUE(h.isOk()) << h.status().toString();
        const std::span<const uint8_t> rest(bytes.data() + kFrameHeaderBytes, bytes.size() - kFrameHeaderBytes);
        if (h->kind == FrameKind::kA2f || h->kind == FrameKind::kF2a) {
            const size_t descriptor_bytes = h->segment_count * kSegmentDescriptorBytes;
            ASSERT_GE(rest.size(), descriptor_bytes) << name;
            const auto layout = decodeSegments(h.value(), rest.first(descriptor_bytes), name);
            EXPECT_TRUE(layout.isOk()) << layout.status().toString();
        } else if (h->kind == FrameKind::kHello) {
            ASSERT_GE(rest.size(), h->payload_bytes) << name;
            const auto hello = decodeHelloPayload(rest.first(h->payload_bytes), name);
            EXPECT_TRUE(hello.isOk()) << hello.status().toString();
        } else if (h->kind == FrameKind::kHelloAck) {
            ASSERT_GE(rest.size(), h->payload_bytes) << name;
            // The seed is the ack of an FFN rank with the fuzz target's first limits.
            const auto ack = decodeHelloAckPayload(rest.first(h->payload_bytes), name);
            ASSERT_TRUE(ack.isOk()) << ack.status().toString();
            EXPECT_EQ(*ack, limits) << name;
        }
    }
    EXPECT_GE(seeds, 3u);
}

}  // namespace
}  // namespace afd::transport
