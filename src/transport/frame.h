// The wire format shared by every byte-stream backend (tcp today).
//
// A frame is a fixed 48-byte little-endian header, `segment_count` 8-byte segment descriptors, then the payload:
// the segments' bytes back to back, each a row-major [rows, cols] tensor of its dtype (all segments share
// `rows`). Step frames carry the step header (flags, per-stage token counts) in the fixed header and have no
// payload; hello / hello_ack / error frames carry a short byte payload and no descriptors.
//
//   offset size field
//        0    4 magic (kFrameMagic)
//        4    2 protocol version (kProtocolVersion)
//        6    1 kind (FrameKind)
//        7    1 segment count (≤ kMaxSegments)
//        8    8 step id
//       16    4 layer
//       20    4 stage (step frames: the number of stages, 1..kMaxStages)
//       24    4 rows
//       28    4 flags (step frames: StepFlag bits)
//       32    8 payload bytes
//       40    8 stage token counts (step frames: 2 × u32; unused stages are 0)
//
// The hello payload (attention → FFN, the first frame on a data connection):
//
//   offset size field
//        0    1 role code (1 attention, 2 ffn)
//        1    3 zero
//        4    4 rank
//        8    4 max rows of any frame the sender receives (FrameLimits::max_rows)
//       12    8 max payload bytes of a data frame the sender receives (FrameLimits::max_frame_bytes)
//       20    n fingerprint, 0..kMaxFingerprintBytes bytes
//
// The hello_ack payload (FFN → attention) is the FFN's limits: max rows u32, then max payload bytes u64. Each side
// compares the other's limits with its own and refuses a peer whose limits differ (tcp_handshake.h), so every frame
// on a connection is bounded by limits both ends agreed on.
//
// Nothing in this file allocates memory sized by a field read from the wire: decoders validate every field
// against the receiver's limits before a caller uses it to size or place anything.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "transport/role.h"

namespace afd::transport {

inline constexpr uint32_t kFrameMagic = 0x46444641;  // "AFDF" in little-endian byte order
// Bumped on any change of the bytes on the wire or of the handshake; peers of different versions never talk.
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr size_t kFrameHeaderBytes = 48;
inline constexpr size_t kSegmentDescriptorBytes = 8;
inline constexpr uint32_t kMaxSegments = 8;
// Stages of one step: 1, or 2 under dual-batch overlap.
inline constexpr uint32_t kMaxStages = 2;
// Fingerprints are opaque strings chosen by the caller (a hex hash in practice).
inline constexpr size_t kMaxFingerprintBytes = 256;
// Hello and error payloads.
inline constexpr size_t kMaxControlPayloadBytes = 4096;
// The hello_ack payload: the FFN's frame limits.
inline constexpr size_t kHelloAckPayloadBytes = 12;
// Receive buffers place every segment at a multiple of this many bytes.
inline constexpr size_t kSegmentAlignment = 64;

enum class FrameKind : uint8_t { kStep = 1, kA2f = 2, kF2a = 3, kHello = 4, kHelloAck = 5, kError = 6 };
std::string_view frameKindName(FrameKind kind);

enum StepFlag : uint32_t {
    kStepWarmup = 1u << 0,    // a warm-up run; the FFN computes eagerly
    kStepCapture = 1u << 1,   // the attention side is capturing a graph of this step
    kStepProfile = 1u << 2,   // the memory-profile run
    kStepShutdown = 1u << 3,  // the sender has finished: no frames follow and it leaves
};
inline constexpr uint32_t kKnownStepFlags = kStepWarmup | kStepCapture | kStepProfile | kStepShutdown;
// "warmup|capture", or "none".
std::string stepFlagsToString(uint32_t flags);

// Identifies one exchange of a step: the frames of (step, layer, stage) in one direction.
struct FrameKey {
    uint64_t step = 0;
    uint32_t layer = 0;
    uint32_t stage = 0;
    bool operator==(const FrameKey&) const = default;
};

// One step's control message, sent by an attention rank to each of its FFN peers.
struct StepHeader {
    uint64_t step = 0;
    uint32_t flags = 0;                               // StepFlag bits
    uint32_t num_stages = 1;                          // 1..kMaxStages
    std::array<uint32_t, kMaxStages> stage_tokens{};  // tokens of stage i for i < num_stages, 0 beyond
};

struct SegmentSpec {
    core::DType dtype = core::DType::kF32;
    uint32_t cols = 0;
    bool operator==(const SegmentSpec&) const = default;
};

// What a receiver expects per row of a frame: the segments in order, each [rows, cols] of its dtype.
struct FrameSpec {
    std::vector<SegmentSpec> segments;
    // Bytes of one row across all segments.
    size_t rowBytes() const;
};

// The decoded fixed header. For step frames `stage` holds the number of stages.
struct FrameHeader {
    uint16_t version = kProtocolVersion;
    FrameKind kind = FrameKind::kStep;
    uint8_t segment_count = 0;
    uint64_t step = 0;
    uint32_t layer = 0;
    uint32_t stage = 0;
    uint32_t rows = 0;
    uint32_t flags = 0;
    uint64_t payload_bytes = 0;
    std::array<uint32_t, kMaxStages> stage_tokens{};
};

// The receiver's bounds on what a peer may send; both ends of a connection hold the same (agreed at the hello).
struct FrameLimits {
    uint32_t max_rows = 0;
    size_t max_frame_bytes = 0;  // payload bytes of one data frame
    bool operator==(const FrameLimits&) const = default;
};

// Segment descriptors and where each segment's bytes land in a receive buffer.
struct SegmentLayout {
    uint32_t count = 0;
    std::array<SegmentSpec, kMaxSegments> segments{};
    std::array<size_t, kMaxSegments> offsets{};  // multiples of kSegmentAlignment
    std::array<size_t, kMaxSegments> bytes{};    // rows × cols × dtype size
    // Bytes a receive buffer needs for this layout (the last segment's end).
    size_t extent() const { return count == 0 ? 0 : offsets[count - 1] + bytes[count - 1]; }
};

// Capacity of a receive buffer that holds any data frame within `limits` (payload plus alignment padding).
size_t receiveBufferBytes(const FrameLimits& limits);

// ---- encoding (our own frames; inputs are trusted) ----

using HeaderBytes = std::array<uint8_t, kFrameHeaderBytes>;

HeaderBytes encodeHeader(const FrameHeader& header);
void encodeDescriptor(const SegmentSpec& segment, uint8_t* out);  // writes kSegmentDescriptorBytes
FrameHeader makeStepHeader(const StepHeader& step);
FrameHeader makeDataHeader(FrameKind kind, const FrameKey& key, uint32_t rows, std::span<const SegmentSpec> segments);
// Whole frames with a byte payload: header followed by the payload.
std::vector<uint8_t> encodeHelloFrame(Role role, int rank, std::string_view fingerprint, const FrameLimits& limits);
std::vector<uint8_t> encodeHelloAckFrame(const FrameLimits& limits);
std::vector<uint8_t> encodeErrorFrame(std::string_view text);

// ---- decoding and validation (peer bytes; `peer` names the sender in every message) ----

// Magic, version, kind, segment count, and per-kind rules: step frames have 1..kMaxStages stages, known flags,
// stage counts ≤ limits.max_rows, no payload; data frames have rows ≤ limits.max_rows and payload ≤
// limits.max_frame_bytes; hello/error payloads ≤ kMaxControlPayloadBytes, hello_ack payloads of exactly
// kHelloAckPayloadBytes. kCorrupt for malformed bytes, kMismatch for another protocol version.
core::Result<FrameHeader> decodeHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes, const FrameLimits& limits,
                                       std::string_view peer);

// Checks that `header` is the data frame the receiver waits for: kind, step, layer, stage. kMismatch otherwise
// ("attention rank 1 (127.0.0.1:40122): a2f frame for layer 5 stage 0, expected layer 4").
core::Status checkDataFrameKey(const FrameHeader& header, FrameKind kind, const FrameKey& key, std::string_view peer);

// Decodes `header.segment_count` descriptors and places the segments: each dtype must be known, cols ≥ 1, the
// sizes must add up to header.payload_bytes. kCorrupt otherwise.
core::Result<SegmentLayout> decodeSegments(const FrameHeader& header, std::span<const uint8_t> descriptor_bytes,
                                           std::string_view peer);

// Checks a decoded layout against what the receiver expects: segment count, each dtype and cols. kMismatch.
core::Status checkSegments(const FrameHeader& header, const SegmentLayout& layout, const FrameSpec& spec,
                           std::string_view peer);

struct Hello {
    Role role = Role::kAttention;
    int rank = 0;
    FrameLimits limits;  // what the sender receives; not checked here (any value decodes)
    std::string fingerprint;
};
core::Result<Hello> decodeHelloPayload(std::span<const uint8_t> payload, std::string_view peer);
// The FFN's limits from a hello_ack payload (exactly kHelloAckPayloadBytes bytes; any value decodes).
core::Result<FrameLimits> decodeHelloAckPayload(std::span<const uint8_t> payload, std::string_view peer);

}  // namespace afd::transport
