#include "transport/frame.h"

#include <fmt/format.h>

#include <cstring>
#include <optional>

#include "core/check.h"

namespace afd::transport {
namespace {

// Wire codes of dtypes: fixed here, independent of the order of core::DType.
struct WireDType {
    core::DType dtype;
    uint8_t code;
};
constexpr std::array<WireDType, 15> kWireDTypes = {{
    {core::DType::kBool, 1},
    {core::DType::kU8, 2},
    {core::DType::kI8, 3},
    {core::DType::kF8E5M2, 4},
    {core::DType::kF8E4M3, 5},
    {core::DType::kI16, 6},
    {core::DType::kU16, 7},
    {core::DType::kF16, 8},
    {core::DType::kBf16, 9},
    {core::DType::kI32, 10},
    {core::DType::kU32, 11},
    {core::DType::kF32, 12},
    {core::DType::kF64, 13},
    {core::DType::kI64, 14},
    {core::DType::kU64, 15},
}};

uint8_t dtypeCode(core::DType dtype) {
    for (const auto& entry : kWireDTypes) {
        if (entry.dtype == dtype) return entry.code;
    }
    AFD_FAIL("dtype {} has no wire code", core::dtypeName(dtype));
}

std::optional<core::DType> dtypeFromCode(uint8_t code) {
    for (const auto& entry : kWireDTypes) {
        if (entry.code == code) return entry.dtype;
    }
    return std::nullopt;
}

constexpr uint8_t kRoleCodeAttention = 1;
constexpr uint8_t kRoleCodeFfn = 2;
// Role u8, 3 bytes zero, rank u32, max rows u32, max payload bytes u64 (frame.h).
constexpr size_t kHelloFixedBytes = 20;

void putU16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
}
void putU32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void putU64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t getU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t getU32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
uint64_t getU64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

size_t alignUp(size_t n) { return (n + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment; }

bool isDataKind(FrameKind kind) { return kind == FrameKind::kA2f || kind == FrameKind::kF2a; }

std::vector<uint8_t> encodeBytesFrame(FrameKind kind, std::span<const uint8_t> payload) {
    FrameHeader header;
    header.kind = kind;
    header.payload_bytes = payload.size();
    const HeaderBytes head = encodeHeader(header);
    std::vector<uint8_t> out(kFrameHeaderBytes + payload.size());
    std::memcpy(out.data(), head.data(), head.size());
    if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderBytes, payload.data(), payload.size());
    return out;
}

}  // namespace

std::string_view frameKindName(FrameKind kind) {
    switch (kind) {
        case FrameKind::kStep:
            return "step";
        case FrameKind::kA2f:
            return "a2f";
        case FrameKind::kF2a:
            return "f2a";
        case FrameKind::kHello:
            return "hello";
        case FrameKind::kHelloAck:
            return "hello_ack";
        case FrameKind::kError:
            return "error";
    }
    return "unknown";
}

std::string stepFlagsToString(uint32_t flags) {
    std::string out;
    const auto add = [&](uint32_t bit, std::string_view name) {
        if ((flags & bit) == 0) return;
        if (!out.empty()) out += '|';
        out += name;
    };
    add(kStepWarmup, "warmup");
    add(kStepCapture, "capture");
    add(kStepProfile, "profile");
    add(kStepShutdown, "shutdown");
    if ((flags & ~kKnownStepFlags) != 0) {
        if (!out.empty()) out += '|';
        out += fmt::format("0x{:x}", flags & ~kKnownStepFlags);
    }
    return out.empty() ? "none" : out;
}

size_t FrameSpec::rowBytes() const {
    size_t bytes = 0;
    for (const auto& segment : segments) bytes += static_cast<size_t>(segment.cols) * core::dtypeSize(segment.dtype);
    return bytes;
}

size_t receiveBufferBytes(const FrameLimits& limits) {
    return limits.max_frame_bytes + kMaxSegments * kSegmentAlignment;
}

HeaderBytes encodeHeader(const FrameHeader& header) {
    HeaderBytes out{};
    putU32(&out[0], kFrameMagic);
    putU16(&out[4], header.version);
    out[6] = static_cast<uint8_t>(header.kind);
    out[7] = header.segment_count;
    putU64(&out[8], header.step);
    putU32(&out[16], header.layer);
    putU32(&out[20], header.stage);
    putU32(&out[24], header.rows);
    putU32(&out[28], header.flags);
    putU64(&out[32], header.payload_bytes);
    putU32(&out[40], header.stage_tokens[0]);
    putU32(&out[44], header.stage_tokens[1]);
    return out;
}

void encodeDescriptor(const SegmentSpec& segment, uint8_t* out) {
    std::memset(out, 0, kSegmentDescriptorBytes);
    out[0] = dtypeCode(segment.dtype);
    putU32(&out[4], segment.cols);
}

FrameHeader makeStepHeader(const StepHeader& step) {
    AFD_CHECK(step.num_stages >= 1 && step.num_stages <= kMaxStages, "step {} has {} stages (1..{})", step.step,
              step.num_stages, kMaxStages);
    FrameHeader header;
    header.kind = FrameKind::kStep;
    header.step = step.step;
    header.stage = step.num_stages;
    header.flags = step.flags;
    for (uint32_t i = 0; i < step.num_stages; ++i) header.stage_tokens[i] = step.stage_tokens[i];
    return header;
}

FrameHeader makeDataHeader(FrameKind kind, const FrameKey& key, uint32_t rows, std::span<const SegmentSpec> segments) {
    AFD_CHECK(isDataKind(kind), "{} is not a data frame kind", frameKindName(kind));
    AFD_CHECK(segments.size() <= kMaxSegments, "{} segments (at most {})", segments.size(), kMaxSegments);
    FrameHeader header;
    header.kind = kind;
    header.segment_count = static_cast<uint8_t>(segments.size());
    header.step = key.step;
    header.layer = key.layer;
    header.stage = key.stage;
    header.rows = rows;
    for (const auto& segment : segments) {
        header.payload_bytes += static_cast<uint64_t>(rows) * segment.cols * core::dtypeSize(segment.dtype);
    }
    return header;
}

std::vector<uint8_t> encodeHelloFrame(Role role, int rank, std::string_view fingerprint, const FrameLimits& limits) {
    AFD_CHECK(fingerprint.size() <= kMaxFingerprintBytes, "fingerprint of {} bytes (at most {})", fingerprint.size(),
              kMaxFingerprintBytes);
    std::vector<uint8_t> payload(kHelloFixedBytes + fingerprint.size(), 0);
    payload[0] = role == Role::kAttention ? kRoleCodeAttention : kRoleCodeFfn;
    putU32(&payload[4], static_cast<uint32_t>(rank));
    putU32(&payload[8], limits.max_rows);
    putU64(&payload[12], limits.max_frame_bytes);
    std::memcpy(payload.data() + kHelloFixedBytes, fingerprint.data(), fingerprint.size());
    return encodeBytesFrame(FrameKind::kHello, payload);
}

std::vector<uint8_t> encodeHelloAckFrame(const FrameLimits& limits) {
    std::array<uint8_t, kHelloAckPayloadBytes> payload{};
    putU32(&payload[0], limits.max_rows);
    putU64(&payload[4], limits.max_frame_bytes);
    return encodeBytesFrame(FrameKind::kHelloAck, payload);
}

std::vector<uint8_t> encodeErrorFrame(std::string_view text) {
    const std::string_view clipped = text.substr(0, kMaxControlPayloadBytes);
    return encodeBytesFrame(FrameKind::kError,
                            std::span(reinterpret_cast<const uint8_t*>(clipped.data()), clipped.size()));
}

core::Result<FrameHeader> decodeHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes, const FrameLimits& limits,
                                       std::string_view peer) {
    const uint8_t* p = bytes.data();
    const uint32_t magic = getU32(&p[0]);
    if (magic != kFrameMagic) {
        return core::corrupt("{}: bad frame magic 0x{:08x}, expected 0x{:08x}", peer, magic, kFrameMagic);
    }
    FrameHeader h;
    h.version = getU16(&p[4]);
    if (h.version != kProtocolVersion) {
        return core::mismatch("{}: frame of protocol version {}, this rank speaks version {}", peer, h.version,
                              kProtocolVersion);
    }
    const uint8_t kind = p[6];
    if (kind < static_cast<uint8_t>(FrameKind::kStep) || kind > static_cast<uint8_t>(FrameKind::kError)) {
        return core::corrupt("{}: unknown frame kind {}", peer, kind);
    }
    h.kind = static_cast<FrameKind>(kind);
    h.segment_count = p[7];
    h.step = getU64(&p[8]);
    h.layer = getU32(&p[16]);
    h.stage = getU32(&p[20]);
    h.rows = getU32(&p[24]);
    h.flags = getU32(&p[28]);
    h.payload_bytes = getU64(&p[32]);
    h.stage_tokens = {getU32(&p[40]), getU32(&p[44])};
    const std::string_view kind_name = frameKindName(h.kind);

    if (isDataKind(h.kind)) {
        if (h.segment_count > kMaxSegments) {
            return core::corrupt("{}: {} frame with {} segments, at most {}", peer, kind_name, h.segment_count,
                                 kMaxSegments);
        }
        if (h.stage >= kMaxStages) {
            return core::corrupt("{}: {} frame for stage {}, stages are 0..{}", peer, kind_name, h.stage,
                                 kMaxStages - 1);
        }
        if (h.rows > limits.max_rows) {
            return core::corrupt("{}: {} frame for layer {} stage {} with {} rows, at most {}", peer, kind_name,
                                 h.layer, h.stage, h.rows, limits.max_rows);
        }
        if (h.payload_bytes > limits.max_frame_bytes) {
            return core::corrupt("{}: {} frame for layer {} stage {} with {} payload bytes, at most {}", peer,
                                 kind_name, h.layer, h.stage, h.payload_bytes, limits.max_frame_bytes);
        }
        if (h.flags != 0 || h.stage_tokens[0] != 0 || h.stage_tokens[1] != 0) {
            return core::corrupt("{}: {} frame for layer {} stage {} has step fields set", peer, kind_name, h.layer,
                                 h.stage);
        }
        return h;
    }

    if (h.segment_count != 0 || h.rows != 0) {
        return core::corrupt("{}: {} frame with {} segments and {} rows, expected none", peer, kind_name,
                             h.segment_count, h.rows);
    }
    if (h.kind == FrameKind::kStep) {
        if (h.layer != 0) {
            return core::corrupt("{}: step {} header with layer {} set, expected 0", peer, h.step, h.layer);
        }
        if (h.stage < 1 || h.stage > kMaxStages) {
            return core::corrupt("{}: step {} header with {} stages, expected 1..{}", peer, h.step, h.stage,
                                 kMaxStages);
        }
        if ((h.flags & ~kKnownStepFlags) != 0) {
            return core::corrupt("{}: step {} header with unknown flags 0x{:x}", peer, h.step,
                                 h.flags & ~kKnownStepFlags);
        }
        for (uint32_t i = 0; i < kMaxStages; ++i) {
            const uint32_t tokens = h.stage_tokens[i];
            if (i >= h.stage && tokens != 0) {
                return core::corrupt("{}: step {} header has {} tokens in unused stage {}", peer, h.step, tokens, i);
            }
            if (tokens > limits.max_rows) {
                return core::corrupt("{}: step {} header with {} tokens in stage {}, at most {}", peer, h.step, tokens,
                                     i, limits.max_rows);
            }
        }
        if (h.payload_bytes != 0) {
            return core::corrupt("{}: step {} header with a payload of {} bytes, expected none", peer, h.step,
                                 h.payload_bytes);
        }
        return h;
    }
    // Hello, hello_ack and error frames carry only their payload.
    if (h.step != 0 || h.layer != 0 || h.stage != 0 || h.flags != 0 || h.stage_tokens[0] != 0 ||
        h.stage_tokens[1] != 0) {
        return core::corrupt("{}: {} frame with step fields set (step {}, layer {}, stage {}, flags 0x{:x})", peer,
                             kind_name, h.step, h.layer, h.stage, h.flags);
    }
    if (h.kind == FrameKind::kHelloAck && h.payload_bytes != kHelloAckPayloadBytes) {
        return core::corrupt("{}: hello_ack frame with a payload of {} bytes, expected {}", peer, h.payload_bytes,
                             kHelloAckPayloadBytes);
    }
    if (h.payload_bytes > kMaxControlPayloadBytes) {
        return core::corrupt("{}: {} frame with a payload of {} bytes, at most {}", peer, kind_name, h.payload_bytes,
                             kMaxControlPayloadBytes);
    }
    return h;
}

core::Status checkDataFrameKey(const FrameHeader& header, FrameKind kind, const FrameKey& key, std::string_view peer) {
    const std::string_view got = frameKindName(header.kind);
    const std::string_view want = frameKindName(kind);
    if (header.kind != kind) {
        if (isDataKind(header.kind)) {
            return core::mismatch(
                "{}: {} frame for layer {} stage {}, expected an {} frame for step {} layer {} "
                "stage {}",
                peer, got, header.layer, header.stage, want, key.step, key.layer, key.stage);
        }
        return core::mismatch("{}: {} frame, expected an {} frame for step {} layer {} stage {}", peer, got, want,
                              key.step, key.layer, key.stage);
    }
    if (header.step != key.step) {
        return core::mismatch("{}: {} frame for step {}, expected step {}", peer, got, header.step, key.step);
    }
    if (header.layer != key.layer) {
        return core::mismatch("{}: {} frame for layer {} stage {}, expected layer {}", peer, got, header.layer,
                              header.stage, key.layer);
    }
    if (header.stage != key.stage) {
        return core::mismatch("{}: {} frame for layer {} stage {}, expected stage {}", peer, got, header.layer,
                              header.stage, key.stage);
    }
    return core::Status::ok();
}

core::Result<SegmentLayout> decodeSegments(const FrameHeader& header, std::span<const uint8_t> descriptor_bytes,
                                           std::string_view peer) {
    AFD_CHECK(header.segment_count <= kMaxSegments &&
                  descriptor_bytes.size() == header.segment_count * kSegmentDescriptorBytes,
              "{} descriptor bytes for {} segments", descriptor_bytes.size(), header.segment_count);
    const std::string_view kind_name = frameKindName(header.kind);
    SegmentLayout layout;
    layout.count = header.segment_count;
    uint64_t total = 0;
    size_t offset = 0;
    for (uint32_t i = 0; i < layout.count; ++i) {
        const uint8_t* d = descriptor_bytes.data() + i * kSegmentDescriptorBytes;
        const std::optional<core::DType> dtype = dtypeFromCode(d[0]);
        if (!dtype) {
            return core::corrupt("{}: {} frame for layer {} stage {}: segment {} has unknown dtype code {}", peer,
                                 kind_name, header.layer, header.stage, i, d[0]);
        }
        const uint32_t cols = getU32(&d[4]);
        if (cols == 0 || d[1] != 0 || d[2] != 0 || d[3] != 0) {
            return core::corrupt("{}: {} frame for layer {} stage {}: segment {} descriptor is malformed (cols {})",
                                 peer, kind_name, header.layer, header.stage, i, cols);
        }
        // NOTE: rows ≤ max_rows (u32) and cols < 2^32, dtype size ≤ 8: the product fits in 2^67, so each
        // factor is bounded by the payload before multiplying.
        const uint64_t row_bytes = static_cast<uint64_t>(cols) * core::dtypeSize(*dtype);
        if (header.rows != 0 && row_bytes > header.payload_bytes / header.rows) {
            return core::corrupt(
                "{}: {} frame for layer {} stage {}: segment {} of [{}, {}] {} exceeds the "
                "frame's {} payload bytes",
                peer, kind_name, header.layer, header.stage, i, header.rows, cols, core::dtypeName(*dtype),
                header.payload_bytes);
        }
        const uint64_t bytes = row_bytes * header.rows;
        // NOTE: total <= payload_bytes here, so the difference cannot wrap; the sum could for a payload above 2^63.
        if (bytes > header.payload_bytes - total) {
            return core::corrupt(
                "{}: {} frame for layer {} stage {}: segments add up to more than the frame's {} "
                "payload bytes",
                peer, kind_name, header.layer, header.stage, header.payload_bytes);
        }
        total += bytes;
        layout.segments[i] = {*dtype, cols};
        layout.offsets[i] = offset;
        layout.bytes[i] = static_cast<size_t>(bytes);
        offset = alignUp(offset + layout.bytes[i]);
    }
    if (total != header.payload_bytes) {
        return core::corrupt("{}: {} frame for layer {} stage {}: segments add up to {} bytes, the header says {}",
                             peer, kind_name, header.layer, header.stage, total, header.payload_bytes);
    }
    return layout;
}

core::Status checkSegments(const FrameHeader& header, const SegmentLayout& layout, const FrameSpec& spec,
                           std::string_view peer) {
    const std::string_view kind_name = frameKindName(header.kind);
    if (layout.count != spec.segments.size()) {
        return core::mismatch("{}: {} frame for layer {} stage {} with {} segments, expected {}", peer, kind_name,
                              header.layer, header.stage, layout.count, spec.segments.size());
    }
    for (uint32_t i = 0; i < layout.count; ++i) {
        const SegmentSpec& got = layout.segments[i];
        const SegmentSpec& want = spec.segments[i];
        if (got.dtype != want.dtype) {
            return core::mismatch("{}: {} frame for layer {} stage {}: segment {} is {}, expected {}", peer, kind_name,
                                  header.layer, header.stage, i, core::dtypeName(got.dtype),
                                  core::dtypeName(want.dtype));
        }
        if (got.cols != want.cols) {
            return core::mismatch("{}: {} frame for layer {} stage {}: segment {} has {} cols, expected {}", peer,
                                  kind_name, header.layer, header.stage, i, got.cols, want.cols);
        }
    }
    return core::Status::ok();
}

core::Result<Hello> decodeHelloPayload(std::span<const uint8_t> payload, std::string_view peer) {
    if (payload.size() < kHelloFixedBytes || payload.size() > kHelloFixedBytes + kMaxFingerprintBytes) {
        return core::corrupt("{}: hello payload of {} bytes, expected {}..{}", peer, payload.size(), kHelloFixedBytes,
                             kHelloFixedBytes + kMaxFingerprintBytes);
    }
    Hello hello;
    if (payload[0] == kRoleCodeAttention) {
        hello.role = Role::kAttention;
    } else if (payload[0] == kRoleCodeFfn) {
        hello.role = Role::kFfn;
    } else {
        return core::corrupt("{}: hello with unknown role code {}", peer, payload[0]);
    }
    if (payload[1] != 0 || payload[2] != 0 || payload[3] != 0) {
        return core::corrupt("{}: hello with nonzero padding bytes after the role", peer);
    }
    const uint32_t rank = getU32(&payload[4]);
    if (rank > static_cast<uint32_t>(INT32_MAX)) return core::corrupt("{}: hello with rank {}", peer, rank);
    hello.rank = static_cast<int>(rank);
    hello.limits.max_rows = getU32(&payload[8]);
    hello.limits.max_frame_bytes = static_cast<size_t>(getU64(&payload[12]));
    hello.fingerprint.assign(reinterpret_cast<const char*>(payload.data() + kHelloFixedBytes),
                             payload.size() - kHelloFixedBytes);
    return hello;
}

core::Result<FrameLimits> decodeHelloAckPayload(std::span<const uint8_t> payload, std::string_view peer) {
    if (payload.size() != kHelloAckPayloadBytes) {
        return core::corrupt("{}: hello_ack payload of {} bytes, expected {}", peer, payload.size(),
                             kHelloAckPayloadBytes);
    }
    return FrameLimits{getU32(&payload[0]), static_cast<size_t>(getU64(&payload[4]))};
}

}  // namespace afd::transport
