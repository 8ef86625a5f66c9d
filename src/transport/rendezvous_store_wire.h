// The rendezvous store's wire format (rendezvous_store.h), as pure functions on bytes: what the server reads off a
// client's stream and what a client reads back, with no socket in sight, so that both ends share one codec and it
// can be fuzzed.
//
// Little-endian. A request is u32 body length, then op u8, flags u8, key length u16, timeout ms u32, key, value; a
// reply is u32 body length, then code u8, value. The ops: set (flags: kStoreFlagExclusive, store only when absent;
// kStoreFlagOwned, the key lives only as long as the connection that set it) and get (flags 0, no value; the timeout
// is how long the server waits for the key, 0: answer now).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace afd::transport {

inline constexpr size_t kMaxStoreKeyBytes = 256;
inline constexpr size_t kMaxStoreValueBytes = 64 * 1024;

inline constexpr uint8_t kStoreOpSet = 1;
inline constexpr uint8_t kStoreOpGet = 2;
inline constexpr uint8_t kStoreFlagExclusive = 1;
inline constexpr uint8_t kStoreFlagOwned = 2;

inline constexpr uint8_t kStoreReplyOk = 0;
inline constexpr uint8_t kStoreReplyNotFound = 1;  // a get whose wait ran out
inline constexpr uint8_t kStoreReplyExists = 2;    // an exclusive set of a present key; the value is the present one

inline constexpr size_t kStoreLengthBytes = 4;        // the u32 body length before every request and reply
inline constexpr size_t kStoreRequestFixedBytes = 8;  // op, flags, key length u16, timeout u32
inline constexpr size_t kMaxStoreRequestBody = kStoreRequestFixedBytes + kMaxStoreKeyBytes + kMaxStoreValueBytes;
inline constexpr size_t kMaxStoreReplyBody = 1 + kMaxStoreValueBytes;
inline constexpr uint32_t kMaxStoreWaitMs = 24u * 3600u * 1000u;

struct StoreRequest {
    uint8_t op = 0;
    uint8_t flags = 0;
    uint32_t timeout_ms = 0;  // read by get only
    std::string key;          // 1..kMaxStoreKeyBytes bytes
    std::string value;        // up to kMaxStoreValueBytes bytes; empty for get
};

struct DecodedStoreRequest {
    StoreRequest request;
    size_t consumed = 0;  // bytes of the stream it took: length and body
};

// Appends `request`, framed, to `out`. The key and value must be within bounds (AFD_CHECK).
void appendStoreRequest(const StoreRequest& request, std::string& out);

// The first request of `buffered` (the bytes a client sent, not yet handled): nullopt while it is incomplete;
// kCorrupt with the reason when the stream is malformed (a body length outside kStoreRequestFixedBytes..
// kMaxStoreRequestBody, found as soon as the length is in; a key outside 1..kMaxStoreKeyBytes or beyond the body;
// an op, flags or value that no request of the protocol has). The server closes such a client.
core::Result<std::optional<DecodedStoreRequest>> decodeStoreRequest(std::span<const uint8_t> buffered);

// Appends a reply, framed, to `out`. The value must be within kMaxStoreValueBytes (AFD_CHECK).
void appendStoreReply(uint8_t code, std::string_view value, std::string& out);

// A reply's body length from its 4 length bytes: kCorrupt "<where>: reply of N bytes (expected 1..M)" outside
// 1..kMaxStoreReplyBody.
core::Result<uint32_t> decodeStoreReplyLength(std::span<const uint8_t, kStoreLengthBytes> length,
                                              std::string_view where);

struct StoreReply {
    uint8_t code = 0;
    std::string value;
};
// A reply from its body (1..kMaxStoreReplyBody bytes, as decodeStoreReplyLength accepted: AFD_CHECK).
StoreReply decodeStoreReplyBody(std::span<const uint8_t> body);

}  // namespace afd::transport
