#include "transport/rendezvous_store_wire.h"

#include <fmt/format.h>

#include "core/check.h"

namespace afd::transport {
namespace {

void putU32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t getU32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }

// Whether the protocol has a request of this op, flags and value.
bool isKnownRequest(uint8_t op, uint8_t flags, size_t value_bytes) {
    if (op == kStoreOpSet) return (flags & ~(kStoreFlagExclusive | kStoreFlagOwned)) == 0;
    if (op == kStoreOpGet) return flags == 0 && value_bytes == 0;
    return false;
}

}  // namespace

void appendStoreRequest(const StoreRequest& request, std::string& out) {
    AFD_CHECK(!request.key.empty() && request.key.size() <= kMaxStoreKeyBytes, "store key of {} bytes",
              request.key.size());
    AFD_CHECK(request.value.size() <= kMaxStoreValueBytes, "store value of {} bytes", request.value.size());
    putU32(out, static_cast<uint32_t>(kStoreRequestFixedBytes + request.key.size() + request.value.size()));
    out.push_back(static_cast<char>(request.op));
    out.push_back(static_cast<char>(request.flags));
    out.push_back(static_cast<char>(request.key.size() & 0xff));
    out.push_back(static_cast<char>(request.key.size() >> 8));
    putU32(out, request.timeout_ms);
    out.append(request.key);
    out.append(request.value);
}

core::Result<std::optional<DecodedStoreRequest>> decodeStoreRequest(std::span<const uint8_t> buffered) {
    if (buffered.size() < kStoreLengthBytes) return std::optional<DecodedStoreRequest>();
    const uint32_t body = getU32(buffered.data());
    if (body < kStoreRequestFixedBytes || body > kMaxStoreRequestBody) {
        return core::corrupt("request of {} bytes (expected {}..{})", body, kStoreRequestFixedBytes,
                             kMaxStoreRequestBody);
    }
    if (buffered.size() < kStoreLengthBytes + body) return std::optional<DecodedStoreRequest>();
    const uint8_t* p = buffered.data() + kStoreLengthBytes;
    DecodedStoreRequest decoded;
    StoreRequest& request = decoded.request;
    request.op = p[0];
    request.flags = p[1];
    const size_t key_len = p[2] | (p[3] << 8);
    request.timeout_ms = getU32(p + 4);
    if (key_len == 0 || key_len > kMaxStoreKeyBytes || kStoreRequestFixedBytes + key_len > body) {
        return core::corrupt("key of {} bytes (expected 1..{})", key_len, kMaxStoreKeyBytes);
    }
    const size_t value_len = body - kStoreRequestFixedBytes - key_len;
    if (!isKnownRequest(request.op, request.flags, value_len)) {
        return core::corrupt("malformed request (op {}, flags {})", request.op, request.flags);
    }
    request.key.assign(reinterpret_cast<const char*>(p + kStoreRequestFixedBytes), key_len);
    request.value.assign(reinterpret_cast<const char*>(p + kStoreRequestFixedBytes + key_len), value_len);
    decoded.consumed = kStoreLengthBytes + body;
    return std::optional<DecodedStoreRequest>(std::move(decoded));
}

void appendStoreReply(uint8_t code, std::string_view value, std::string& out) {
    AFD_CHECK(value.size() <= kMaxStoreValueBytes, "store reply value of {} bytes", value.size());
    putU32(out, static_cast<uint32_t>(1 + value.size()));
    out.push_back(static_cast<char>(code));
    out.append(value);
}

core::Result<uint32_t> decodeStoreReplyLength(std::span<const uint8_t, kStoreLengthBytes> length,
                                              std::string_view where) {
    const uint32_t body = getU32(length.data());
    if (body < 1 || body > kMaxStoreReplyBody) {
        return core::corrupt("{}: reply of {} bytes (expected 1..{})", where, body, kMaxStoreReplyBody);
    }
    return body;
}

StoreReply decodeStoreReplyBody(std::span<const uint8_t> body) {
    AFD_CHECK(!body.empty() && body.size() <= kMaxStoreReplyBody, "store reply body of {} bytes", body.size());
    StoreReply reply;
    reply.code = body[0];
    reply.value.assign(reinterpret_cast<const char*>(body.data() + 1), body.size() - 1);
    return reply;
}

}  // namespace afd::transport
