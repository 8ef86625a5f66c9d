#include "transport/connector.h"

#include <fmt/format.h>

namespace afd::transport {

std::string PeerInfo::describe() const {
    if (address.empty()) return fmt::format("{} rank {}", roleName(role), rank);
    return fmt::format("{} rank {} ({})", roleName(role), rank, address);
}

}  // namespace afd::transport
