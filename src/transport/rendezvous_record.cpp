#include "transport/rendezvous_record.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <limits>

namespace afd::transport {

std::string rankRecordKey(Role role, int rank) { return fmt::format("afd/rank/{}/{}", roleName(role), rank); }

std::string encodeRankRecord(const RankRecord& record) {
    nlohmann::json j = {{"role", roleName(record.role)},
                        {"rank", record.rank},
                        {"protocol_version", record.protocol_version},
                        {"fingerprint", record.fingerprint}};
    if (record.session != 0) j["session"] = record.session;
    return j.dump();
}

core::Result<RankRecord> decodeRankRecord(std::string_view text, Role role, int rank, std::string_view where) {
    const std::string key = rankRecordKey(role, rank);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return core::corrupt("{}: record '{}' is not a JSON object", where, key);
    const auto field = [&](const char* name) -> const nlohmann::json* {
        auto it = j.find(name);
        return it == j.end() ? nullptr : &*it;
    };
    const nlohmann::json* role_field = field("role");
    const nlohmann::json* rank_field = field("rank");
    const nlohmann::json* version = field("protocol_version");
    const nlohmann::json* fingerprint = field("fingerprint");
    const nlohmann::json* session = field("session");
    if (!role_field || !role_field->is_string() || !rank_field || !rank_field->is_number_integer() || !version ||
        !version->is_number_unsigned() || !fingerprint || !fingerprint->is_string()) {
        return core::corrupt("{}: record '{}' lacks role, rank, protocol_version or fingerprint: {}", where, key, text);
    }
    // A version beyond 32 bits would compare equal to its truncation.
    if (version->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return core::corrupt("{}: record '{}' has protocol_version {}, beyond 32 bits", where, key,
                             version->get<uint64_t>());
    }
    // NOTE: nlohmann reads integers up to 2^64 - 1 as unsigned and refuses larger ones, so an unsigned session is
    // exact.
    if (session != nullptr && !session->is_number_unsigned()) {
        return core::corrupt("{}: record '{}' has a session that is not an unsigned 64-bit integer: {}", where, key,
                             text);
    }
    if (parseRole(role_field->get<std::string>()) != role || rank_field->get<int64_t>() != rank) {
        return core::corrupt("{}: record '{}' names {} rank {}", where, key, role_field->get<std::string>(),
                             rank_field->get<int64_t>());
    }
    RankRecord record;
    record.role = role;
    record.rank = rank;
    record.protocol_version = static_cast<uint32_t>(version->get<uint64_t>());
    record.fingerprint = fingerprint->get<std::string>();
    record.session = session != nullptr ? session->get<uint64_t>() : 0;
    return record;
}

}  // namespace afd::transport
