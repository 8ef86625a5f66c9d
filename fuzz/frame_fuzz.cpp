// libFuzzer target: the wire decoders of src/transport/frame.h on arbitrary bytes, as a receiver meets them. The
// first 48 bytes are a frame header, decoded under two fixed sets of limits; the rest of the input is what follows
// on the wire: segment descriptors (then a receiver's expected segments) for data frames, the payload for hello
// frames. Beyond "no crash, no sanitizer report, no exception", an accepted frame must keep what the receivers
// rely on, most of all that a layout never reaches past the receive buffer sized for the limits
// (extent() <= receiveBufferBytes(limits)). A violation traps.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "transport/afd_wire.h"
#include "transport/frame.h"

namespace {

using afd::core::DType;
using afd::transport::FrameHeader;
using afd::transport::FrameKind;
using afd::transport::FrameLimits;
using afd::transport::FrameSpec;
using afd::transport::SegmentLayout;
using afd::transport::SegmentSpec;
namespace wire = afd::transport;

constexpr std::string_view kPeer = "fuzz peer";

// What an FFN rank of Qwen3-30B-A3B receives in m2n with max_num_tokens 8192, and the widest limits whose
// receive buffer size is still representable.
const FrameLimits kModelLimits{8192, wire::m2nDispatchSpec(2048, 8).rowBytes() * 8192};
const FrameLimits kWidestLimits{std::numeric_limits<uint32_t>::max(),
                                std::numeric_limits<size_t>::max() - wire::receiveBufferBytes({0, 0})};

void require(bool condition) {
    if (!condition) __builtin_trap();
}

bool startsWithPeer(const afd::core::Status& status) { return status.message().rfind(kPeer, 0) == 0; }

// A receiver's expectation made of input bytes: up to kMaxSegments (dtype code, cols) pairs of 5 bytes.
FrameSpec specFromBytes(std::span<const uint8_t> bytes) {
    static constexpr DType kDtypes[] = {DType::kF32, DType::kI32, DType::kBf16, DType::kU8};
    FrameSpec spec;
    while (bytes.size() >= 5 && spec.segments.size() < wire::kMaxSegments) {
        uint32_t cols = 0;
        std::memcpy(&cols, bytes.data() + 1, sizeof(cols));
        spec.segments.push_back({kDtypes[bytes[0] % 4], cols});
        bytes = bytes.subspan(5);
    }
    return spec;
}

void checkLayout(const FrameHeader& h, const SegmentLayout& layout, std::span<const uint8_t> descriptors,
                 const FrameLimits& limits) {
    require(layout.count == h.segment_count);
    uint64_t total = 0;
    size_t previous_end = 0;
    for (uint32_t i = 0; i < layout.count; ++i) {
        const SegmentSpec& segment = layout.segments[i];
        require(segment.cols >= 1);
        require(layout.bytes[i] == static_cast<uint64_t>(h.rows) * segment.cols * afd::core::dtypeSize(segment.dtype));
        require(layout.offsets[i] % wire::kSegmentAlignment == 0);
        require(layout.offsets[i] >= previous_end);                           // in order, never overlapping
        require(layout.offsets[i] - previous_end < wire::kSegmentAlignment);  // padding only
        require(!__builtin_add_overflow(layout.offsets[i], layout.bytes[i], &previous_end));
        require(!__builtin_add_overflow(total, layout.bytes[i], &total));
        // The descriptor re-encodes to the bytes it came from.
        uint8_t encoded[wire::kSegmentDescriptorBytes];
        wire::encodeDescriptor(segment, encoded);
        require(std::memcmp(encoded, descriptors.data() + i * wire::kSegmentDescriptorBytes, sizeof(encoded)) == 0);
    }
    require(total == h.payload_bytes);
    require(layout.extent() == previous_end);
    require(layout.extent() <= wire::receiveBufferBytes(limits));
}

// checkSegments accepts exactly the specs that list the layout's segments.
void checkAgainstSpecs(const FrameHeader& h, const SegmentLayout& layout, std::span<const uint8_t> rest) {
    FrameSpec own;
    own.segments.assign(layout.segments.begin(), layout.segments.begin() + layout.count);
    require(wire::checkSegments(h, layout, own, kPeer).isOk());
    require(own.rowBytes() * h.rows == h.payload_bytes);

    const FrameSpec other = specFromBytes(rest);
    const bool same = other.segments.size() == layout.count &&
                      std::equal(other.segments.begin(), other.segments.end(), layout.segments.begin());
    const auto status = wire::checkSegments(h, layout, other, kPeer);
    require(status.isOk() == same);
    if (!status.isOk()) require(startsWithPeer(status));
}

void checkDataFrame(const FrameHeader& h, std::span<const uint8_t> rest, const FrameLimits& limits) {
    require(h.segment_count <= wire::kMaxSegments && h.stage < wire::kMaxStages);
    require(h.rows <= limits.max_rows && h.payload_bytes <= limits.max_frame_bytes);
    require(h.flags == 0 && h.stage_tokens[0] == 0 && h.stage_tokens[1] == 0);
    const wire::FrameKey key{h.step, h.layer, h.stage};
    require(wire::checkDataFrameKey(h, h.kind, key, kPeer).isOk());
    const FrameKind other = h.kind == FrameKind::kA2f ? FrameKind::kF2a : FrameKind::kA2f;
    require(!wire::checkDataFrameKey(h, other, key, kPeer).isOk());

    const size_t descriptor_bytes = h.segment_count * wire::kSegmentDescriptorBytes;
    if (rest.size() < descriptor_bytes) return;  // the peer has not sent them yet
    const auto descriptors = rest.first(descriptor_bytes);
    const auto layout = wire::decodeSegments(h, descriptors, kPeer);
    if (!layout.isOk()) {
        require(startsWithPeer(layout.status()));
        return;
    }
    checkLayout(h, layout.value(), descriptors, limits);
    checkAgainstSpecs(h, layout.value(), rest.subspan(descriptor_bytes));
}

void checkStepFrame(const FrameHeader& h, const FrameLimits& limits) {
    require(h.stage >= 1 && h.stage <= wire::kMaxStages);
    require((h.flags & ~wire::kKnownStepFlags) == 0);
    require(h.payload_bytes == 0 && h.segment_count == 0 && h.rows == 0);
    for (uint32_t i = 0; i < wire::kMaxStages; ++i) {
        require(h.stage_tokens[i] <= limits.max_rows);
        if (i >= h.stage) require(h.stage_tokens[i] == 0);
    }
}

void checkHello(const FrameHeader& h, std::span<const uint8_t> rest) {
    if (rest.size() < h.payload_bytes) return;
    const auto payload = rest.first(static_cast<size_t>(h.payload_bytes));
    const auto hello = wire::decodeHelloPayload(payload, kPeer);
    if (!hello.isOk()) {
        require(startsWithPeer(hello.status()));
        return;
    }
    require(hello->fingerprint.size() <= wire::kMaxFingerprintBytes && hello->rank >= 0);
    // Our own encoder writes the same fields; the three bytes after the role code are not read.
    const std::vector<uint8_t> frame =
        wire::encodeHelloFrame(hello->role, hello->rank, hello->fingerprint, hello->limits);
    require(frame.size() == wire::kFrameHeaderBytes + payload.size());
    require(frame[wire::kFrameHeaderBytes] == payload[0]);
    require(std::equal(payload.begin() + 4, payload.end(), frame.begin() + wire::kFrameHeaderBytes + 4));
}

void checkHelloAck(std::span<const uint8_t> rest) {
    if (rest.size() < wire::kHelloAckPayloadBytes) return;
    const auto payload = rest.first(wire::kHelloAckPayloadBytes);
    const auto limits = wire::decodeHelloAckPayload(payload, kPeer);
    require(limits.isOk());
    // Every payload byte is a limit the decoder read: re-encoding gives the same bytes.
    const std::vector<uint8_t> frame = wire::encodeHelloAckFrame(limits.value());
    require(frame.size() == wire::kFrameHeaderBytes + payload.size());
    require(std::equal(payload.begin(), payload.end(), frame.begin() + wire::kFrameHeaderBytes));
}

void checkFrame(std::span<const uint8_t, wire::kFrameHeaderBytes> head, std::span<const uint8_t> rest,
                const FrameLimits& limits) {
    const auto decoded = wire::decodeHeader(head, limits, kPeer);
    if (!decoded.isOk()) {
        require(startsWithPeer(decoded.status()));
        return;
    }
    const FrameHeader& h = decoded.value();
    // Every byte of the header is a field the decoder read: re-encoding gives the same bytes.
    const wire::HeaderBytes encoded = wire::encodeHeader(h);
    require(std::equal(encoded.begin(), encoded.end(), head.begin()));
    switch (h.kind) {
        case FrameKind::kA2f:
        case FrameKind::kF2a:
            checkDataFrame(h, rest, limits);
            break;
        case FrameKind::kStep:
            checkStepFrame(h, limits);
            break;
        case FrameKind::kHello:
            require(h.payload_bytes <= wire::kMaxControlPayloadBytes);
            checkHello(h, rest);
            break;
        case FrameKind::kHelloAck:
            require(h.payload_bytes == wire::kHelloAckPayloadBytes);
            checkHelloAck(rest);
            break;
        case FrameKind::kError:
            require(h.payload_bytes <= wire::kMaxControlPayloadBytes);
            break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < wire::kFrameHeaderBytes) return 0;
    const std::span<const uint8_t, wire::kFrameHeaderBytes> head(data, wire::kFrameHeaderBytes);
    const std::span<const uint8_t> rest(data + wire::kFrameHeaderBytes, size - wire::kFrameHeaderBytes);
    checkFrame(head, rest, kModelLimits);
    checkFrame(head, rest, kWidestLimits);
    return 0;
}
