// The rendezvous's parsers of untrusted bytes, without sockets: the store's requests and replies, a rank's record,
// and the committed seeds of fuzz/rendezvous_fuzz.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transport/rendezvous_record.h"
#include "transport/rendezvous_store_wire.h"
#include "transport/socket.h"

namespace afd::transport {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::span<const uint8_t> bytesOf(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(StoreWire, RequestRoundTripsAndAPrefixIsIncomplete) {
    const StoreRequest set{kStoreOpSet, kStoreFlagExclusive, 0, "afd/rank/ffn/0", std::string("\0\xff", 2)};
    const StoreRequest get{kStoreOpGet, 0, 30000, "afd/rank/attention/1", ""};
    std::string stream;
    appendStoreRequest(set, stream);
    appendStoreRequest(get, stream);
    ASSERT_EQ(stream.size(), 2 * (kStoreLengthBytes + kStoreRequestFixedBytes) + 14 + 2 + 20);

    auto first = decodeStoreRequest(bytesOf(stream));
    ASSERT_TRUE(first.isOk() && first->has_value()) << first.status().toString();
    EXPECT_EQ((*first)->request.key, set.key);
    EXPECT_EQ((*first)->request.value, set.value);
    EXPECT_EQ((*first)->request.flags, kStoreFlagExclusive);
    auto second = decodeStoreRequest(bytesOf(stream).subspan((*first)->consumed));
    ASSERT_TRUE(second.isOk() && second->has_value());
    EXPECT_EQ((*second)->request.op, kStoreOpGet);
    EXPECT_EQ((*second)->request.timeout_ms, 30000u);
    EXPECT_EQ((*first)->consumed + (*second)->consumed, stream.size());

    for (size_t cut = 0; cut < (*first)->consumed; ++cut) {
        auto partial = decodeStoreRequest(bytesOf(stream).first(cut));
        ASSERT_TRUE(partial.isOk()) << cut;
        EXPECT_FALSE(partial->has_value()) << cut;
    }
}

TEST(StoreWire, MalformedRequestsAreRefusedWithTheReason) {
    const auto refusal = [](const std::string& bytes) { return decodeStoreRequest(bytesOf(bytes)).status(); };
    // A body length beyond any request is refused before the body arrives.
    EXPECT_THAT(refusal(std::string("\xff\xff\xff\x7f", 4)).message(), HasSubstr("request of 2147483647 bytes"));
    EXPECT_THAT(refusal(std::string("\x07\0\0\0", 4)).message(), HasSubstr("request of 7 bytes"));
    // An empty key, and a key longer than the body.
    EXPECT_THAT(refusal(std::string("\x08\0\0\0\x01\0\0\0\0\0\0\0", 12)).message(), HasSubstr("key of 0 bytes"));
    EXPECT_THAT(refusal(std::string("\x09\0\0\0\x01\0\x02\0\0\0\0\0k", 13)).message(), HasSubstr("key of 2 bytes"));
    // An unknown op, unknown flags, a get with a value.
    EXPECT_THAT(refusal(std::string("\x09\0\0\0\x4d\0\x01\0\0\0\0\0k", 13)).message(),
                HasSubstr("malformed request (op 77, flags 0)"));
    EXPECT_THAT(refusal(std::string("\x09\0\0\0\x01\x04\x01\0\0\0\0\0k", 13)).message(),
                HasSubstr("malformed request (op 1, flags 4)"));
    EXPECT_THAT(refusal(std::string("\x09\0\0\0\x02\x02\x01\0\0\0\0\0k", 13)).message(),
                HasSubstr("malformed request (op 2, flags 2)"));  // a get owns nothing
    EXPECT_THAT(refusal(std::string("\x0a\0\0\0\x02\0\x01\0\0\0\0\0kv", 14)).message(),
                HasSubstr("malformed request (op 2, flags 0)"));
    EXPECT_EQ(refusal(std::string("\x0a\0\0\0\x02\0\x01\0\0\0\0\0kv", 14)).code(), core::StatusCode::kCorrupt);
}

TEST(StoreWire, AnOwnedExclusiveSetRoundTrips) {
    const StoreRequest claim{kStoreOpSet, kStoreFlagExclusive | kStoreFlagOwned, 0, "afd/rank/attention/0", "r"};
    std::string stream;
    appendStoreRequest(claim, stream);
    auto decoded = decodeStoreRequest(bytesOf(stream));
    ASSERT_TRUE(decoded.isOk() && decoded->has_value()) << decoded.status().toString();
    EXPECT_EQ((*decoded)->request.flags, kStoreFlagExclusive | kStoreFlagOwned);
    EXPECT_EQ((*decoded)->request.key, claim.key);
}

TEST(StoreWire, ReplyLengthIsBounded) {
    const auto length = [](uint32_t n) {
        const uint8_t b[4] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
                              static_cast<uint8_t>(n >> 24)};
        return decodeStoreReplyLength(std::span<const uint8_t, 4>(b), "store");
    };
    EXPECT_THAT(length(0).status().message(), StartsWith("store: reply of 0 bytes (expected 1.."));
    EXPECT_FALSE(length(kMaxStoreReplyBody + 1).isOk());
    EXPECT_EQ(length(kMaxStoreReplyBody).value(), kMaxStoreReplyBody);

    std::string stream;
    appendStoreReply(kStoreReplyExists, "127.0.0.1:1", stream);
    const auto body = length(static_cast<uint32_t>(stream.size() - kStoreLengthBytes));
    ASSERT_TRUE(body.isOk());
    const StoreReply reply = decodeStoreReplyBody(bytesOf(stream).subspan(kStoreLengthBytes));
    EXPECT_EQ(reply.code, kStoreReplyExists);
    EXPECT_EQ(reply.value, "127.0.0.1:1");
}

TEST(RankRecordWire, RoundTripsAndNamesItsKey) {
    const RankRecord record{Role::kFfn, 1, 2, "fp-\xc3\xa9"};
    const auto decoded = decodeRankRecord(encodeRankRecord(record), Role::kFfn, 1, "rendezvous");
    ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
    EXPECT_EQ(decoded->protocol_version, 2u);
    EXPECT_EQ(decoded->fingerprint, record.fingerprint);

    const auto other = decodeRankRecord(encodeRankRecord(record), Role::kFfn, 2, "rendezvous");
    EXPECT_EQ(other.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(other.status().message(), HasSubstr("record 'afd/rank/ffn/2' names ffn rank 1"));
    EXPECT_THAT(decodeRankRecord("[1]", Role::kFfn, 0, "rendezvous").status().message(),
                HasSubstr("is not a JSON object"));
    EXPECT_THAT(decodeRankRecord(R"({"role":"ffn","rank":0,"protocol_version":-2,"fingerprint":""})", Role::kFfn, 0,
                                 "rendezvous")
                    .status()
                    .message(),
                HasSubstr("lacks role, rank, protocol_version or fingerprint"));
}

TEST(RankRecordWire, TheSessionRoundTripsAndIsAbsentInAClaim) {
    RankRecord record{Role::kAttention, 0, 2, "fp", 7};
    const std::string text = encodeRankRecord(record);
    EXPECT_THAT(text, HasSubstr("\"session\":7"));
    const auto decoded = decodeRankRecord(text, Role::kAttention, 0, "rendezvous");
    ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
    EXPECT_EQ(decoded->session, 7u);
    record.session = 0;
    EXPECT_EQ(encodeRankRecord(record).find("session"), std::string::npos);
    EXPECT_EQ(decodeRankRecord(encodeRankRecord(record), Role::kAttention, 0, "rendezvous").value().session, 0u);
    const auto widest = decodeRankRecord(
        R"({"role":"ffn","rank":0,"protocol_version":2,"fingerprint":"x","session":18446744073709551615})", Role::kFfn,
        0, "rendezvous");
    ASSERT_TRUE(widest.isOk()) << widest.status().toString();
    EXPECT_EQ(widest->session, 18446744073709551615u);
    for (const std::string bad : {"-1", "1.5", "\"3\"", "18446744073709551616", "null"}) {
        const auto refused =
            decodeRankRecord(R"({"role":"ffn","rank":0,"protocol_version":2,"fingerprint":"x","session":)" + bad + "}",
                             Role::kFfn, 0, "rendezvous");
        EXPECT_EQ(refused.status().code(), core::StatusCode::kCorrupt) << bad;
        EXPECT_THAT(refused.status().message(), HasSubstr("has a session that is not an unsigned 64-bit integer"))
            << bad;
    }
}

TEST(RankRecordWire, AVersionBeyond32BitsIsRefusedNotTruncated) {
    // Found by fuzz/rendezvous_fuzz.cpp's invariant: 2^32 + 2 was read as version 2 and matched a rank of version 2.
    const auto record = decodeRankRecord(R"({"role":"ffn","rank":0,"protocol_version":4294967298,"fingerprint":"x"})",
                                         Role::kFfn, 0, "rendezvous");
    EXPECT_EQ(record.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(record.status().message(), HasSubstr("has protocol_version 4294967298, beyond 32 bits"));
    const auto widest = decodeRankRecord(R"({"role":"ffn","rank":0,"protocol_version":4294967295,"fingerprint":"x"})",
                                         Role::kFfn, 0, "rendezvous");
    ASSERT_TRUE(widest.isOk()) << widest.status().toString();
    EXPECT_EQ(widest->protocol_version, 4294967295u);
}

// The fuzz target's seeds (fuzz/corpus/rendezvous/, written with Python's struct and json modules) get the answer
// their names say: request_* streams decode to the end (incomplete: the last one is awaited; refused: the first
// one is refused), reply_* streams decode to the end, record_<role>_<rank> records decode under their own key
// (record_refused_*: are refused), endpoint_* blobs parse and name themselves back (endpoint_refused_*: are refused).
TEST(RendezvousFuzzSeeds, EachSeedGetsTheAnswerItsNameSays) {
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/rendezvous";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ++seeds;
        SCOPED_TRACE(name);
        if (name.starts_with("request_")) {
            std::span<const uint8_t> stream = bytesOf(bytes);
            bool refused = false;
            bool awaited = false;
            while (!stream.empty()) {
                const auto decoded = decodeStoreRequest(stream);
                if (!decoded.isOk()) {
                    refused = true;
                    break;
                }
                if (!decoded->has_value()) {
                    awaited = true;
                    break;
                }
                stream = stream.subspan((*decoded)->consumed);
            }
            EXPECT_EQ(refused, name.starts_with("request_refused_"));
            EXPECT_EQ(awaited, name.starts_with("request_incomplete"));
        } else if (name.starts_with("reply_")) {
            std::span<const uint8_t> stream = bytesOf(bytes);
            while (!stream.empty()) {
                ASSERT_GE(stream.size(), kStoreLengthBytes);
                const auto body = decodeStoreReplyLength(stream.first<kStoreLengthBytes>(), name);
                ASSERT_TRUE(body.isOk()) << body.status().toString();
                ASSERT_GE(stream.size(), kStoreLengthBytes + *body);
                stream = stream.subspan(kStoreLengthBytes + *body);
            }
        } else if (name.starts_with("record_")) {
            const nlohmann::json json = nlohmann::json::parse(bytes);
            const Role role = parseRole(json.at("role").get<std::string>()).value();
            const auto record = decodeRankRecord(bytes, role, json.at("rank").get<int>(), name);
            if (name.starts_with("record_refused_")) {
                EXPECT_FALSE(record.isOk());
                continue;
            }
            ASSERT_TRUE(record.isOk()) << record.status().toString();
            EXPECT_EQ(record->fingerprint, json.at("fingerprint").get<std::string>());
        } else {
            ASSERT_TRUE(name.starts_with("endpoint_"));
            const auto address = parseHostPort(bytes);
            if (name.starts_with("endpoint_refused_")) {
                EXPECT_FALSE(address.isOk());
                continue;
            }
            ASSERT_TRUE(address.isOk()) << address.status().toString();
            EXPECT_EQ(parseHostPort(address->toString()).value().host, address->host);
        }
    }
    EXPECT_GE(seeds, 10u);
}

}  // namespace
}  // namespace afd::transport
