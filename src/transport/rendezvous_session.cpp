#include "transport/rendezvous_session.h"

#include <fmt/format.h>

#include <charconv>

namespace afd::transport {

std::string sessionRankKey(uint64_t session, Role role, int rank) {
    return fmt::format("afd/session/{}/rank/{}/{}", session, roleName(role), rank);
}

std::string sessionSeenKey(uint64_t session, Role role, int rank) {
    return fmt::format("afd/session/{}/seen/{}/{}", session, roleName(role), rank);
}

std::string sessionBlobKey(uint64_t session, Role role, int rank, std::string_view key) {
    return fmt::format("afd/session/{}/blob/{}/{}/{}", session, roleName(role), rank, key);
}

std::string encodeSessionNumber(uint64_t session) { return std::to_string(session); }

core::Result<uint64_t> decodeSessionNumber(std::string_view text, std::string_view where) {
    uint64_t session = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), session);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || session == 0) {
        return core::corrupt("{}: '{}' holds {:?}, not a session number (1, 2, …)", where, kOpenSessionKey, text);
    }
    return session;
}

}  // namespace afd::transport
