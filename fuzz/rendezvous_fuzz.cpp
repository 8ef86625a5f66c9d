// libFuzzer target: what the rendezvous parses off the wire, on arbitrary bytes. The same input is read four ways:
// as the byte stream a client sends the store server (decodeStoreRequest, request after request), as the stream
// the server sends back to a client (decodeStoreReplyLength, decodeStoreReplyBody), as a rank's record read off the
// store (decodeRankRecord, under the role and rank the text itself names and under two fixed ones), and as the
// tcp backend's endpoint blob (parseHostPort). Beyond "no crash, no sanitizer report, no exception", an accepted
// message must mean exactly what its bytes say: it re-encodes to the same bytes or values, within the protocol's
// bounds. A violation traps.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "transport/rendezvous_record.h"
#include "transport/rendezvous_store_wire.h"
#include "transport/socket.h"

namespace {

using afd::transport::Role;
namespace tr = afd::transport;

constexpr std::string_view kWhere = "fuzz store";

void require(bool condition) {
    if (!condition) __builtin_trap();
}

bool startsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// A client's stream, as the server reads it: requests one after the other until one is incomplete or refused.
void checkRequestStream(std::span<const uint8_t> stream) {
    while (true) {
        const auto decoded = tr::decodeStoreRequest(stream);
        if (!decoded.isOk()) {
            require(decoded.status().code() == afd::core::StatusCode::kCorrupt && !decoded.status().message().empty());
            return;
        }
        if (!decoded->has_value()) {
            // Incomplete: a length within bounds whose body has not all arrived, or not even the length.
            if (stream.size() >= tr::kStoreLengthBytes) {
                const uint32_t body =
                    stream[0] | (stream[1] << 8) | (stream[2] << 16) | (static_cast<uint32_t>(stream[3]) << 24);
                require(body >= tr::kStoreRequestFixedBytes && body <= tr::kMaxStoreRequestBody);
                require(stream.size() < tr::kStoreLengthBytes + body);
            }
            return;
        }
        const tr::DecodedStoreRequest& d = **decoded;
        const tr::StoreRequest& r = d.request;
        require(d.consumed <= stream.size());
        require(d.consumed == tr::kStoreLengthBytes + tr::kStoreRequestFixedBytes + r.key.size() + r.value.size());
        require(!r.key.empty() && r.key.size() <= tr::kMaxStoreKeyBytes);
        require(r.value.size() <= tr::kMaxStoreValueBytes);
        if (r.op == tr::kStoreOpSet) {
            require((r.flags & ~(tr::kStoreFlagExclusive | tr::kStoreFlagOwned)) == 0);
        } else {
            require(r.op == tr::kStoreOpGet && r.flags == 0 && r.value.empty());
        }
        // Every byte of the request is a field the server read: re-encoding gives the same bytes.
        std::string encoded;
        tr::appendStoreRequest(r, encoded);
        require(encoded.size() == d.consumed);
        require(std::string_view(reinterpret_cast<const char*>(stream.data()), d.consumed) == encoded);
        // One byte short of it, the request is still awaited, never refused or taken.
        const auto shorter = tr::decodeStoreRequest(stream.first(d.consumed - 1));
        require(shorter.isOk() && !shorter->has_value());
        stream = stream.subspan(d.consumed);
    }
}

// The server's stream, as a client reads it: replies one after the other.
void checkReplyStream(std::span<const uint8_t> stream) {
    while (stream.size() >= tr::kStoreLengthBytes) {
        const auto body = tr::decodeStoreReplyLength(stream.first<tr::kStoreLengthBytes>(), kWhere);
        if (!body.isOk()) {
            require(body.status().code() == afd::core::StatusCode::kCorrupt &&
                    startsWith(body.status().message(), kWhere));
            return;
        }
        require(*body >= 1 && *body <= tr::kMaxStoreReplyBody);
        stream = stream.subspan(tr::kStoreLengthBytes);
        if (stream.size() < *body) return;  // the rest has not arrived
        const tr::StoreReply reply = tr::decodeStoreReplyBody(stream.first(*body));
        require(reply.value.size() == *body - 1 && reply.value.size() <= tr::kMaxStoreValueBytes);
        std::string encoded;
        tr::appendStoreReply(reply.code, reply.value, encoded);
        require(encoded.size() == tr::kStoreLengthBytes + *body);
        require(std::string_view(encoded).substr(tr::kStoreLengthBytes) ==
                std::string_view(reinterpret_cast<const char*>(stream.data()), *body));
        stream = stream.subspan(*body);
    }
}

// A record read under the key of (role, rank): accepted only when it says so, with the values its JSON holds.
void checkRecord(std::string_view text, const nlohmann::json& json, Role role, int rank) {
    const auto record = tr::decodeRankRecord(text, role, rank, kWhere);
    if (!record.isOk()) {
        require(record.status().code() == afd::core::StatusCode::kCorrupt &&
                startsWith(record.status().message(), kWhere));
        return;
    }
    require(json.is_object());
    require(record->role == role && record->rank == rank);
    require(json.at("role") == std::string(tr::roleName(role)) && json.at("rank") == rank);
    // The version compared with this rank's own is the one the peer sent, not a truncation of it.
    require(json.at("protocol_version") == record->protocol_version);
    require(json.at("fingerprint").get<std::string>() == record->fingerprint);
    require(json.contains("session") ? json.at("session") == record->session : record->session == 0);
    // Our own encoder writes it back, and that reads as the same record.
    const std::string encoded = tr::encodeRankRecord(*record);
    const auto again = tr::decodeRankRecord(encoded, role, rank, kWhere);
    require(again.isOk() && again->protocol_version == record->protocol_version &&
            again->fingerprint == record->fingerprint && again->session == record->session);
}

void checkRecords(std::string_view text) {
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    checkRecord(text, json, Role::kFfn, 0);
    checkRecord(text, json, Role::kAttention, 3);
    // Under the role and rank the text names, where it names them, so that acceptance is reachable.
    if (!json.is_object()) return;
    const auto role = json.find("role");
    const auto rank = json.find("rank");
    if (role == json.end() || rank == json.end() || !role->is_string() || !rank->is_number_integer()) return;
    const std::optional<Role> named = tr::parseRole(role->get<std::string>());
    const int64_t named_rank = rank->get<int64_t>();
    if (!named || named_rank < 0 || named_rank > std::numeric_limits<int>::max()) return;
    checkRecord(text, json, *named, static_cast<int>(named_rank));
}

// The tcp backend's endpoint blob: an accepted address is one the connector can dial and name.
void checkEndpoint(std::string_view text) {
    const auto address = tr::parseHostPort(text);
    if (!address.isOk()) {
        require(!address.status().message().empty());
        return;
    }
    require(address->port >= 1 && address->port <= 65535);
    require(!address->host.empty());
    // The resolver reads the host as a C string: a NUL inside would name another host than the blob.
    require(address->host.find('\0') == std::string::npos);
    // The name in messages reads back as the same address.
    const auto again = tr::parseHostPort(address->toString());
    require(again.isOk() && again->host == address->host && again->port == address->port);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    checkRequestStream(bytes);
    checkReplyStream(bytes);
    checkRecords(text);
    checkEndpoint(text);
    return 0;
}
