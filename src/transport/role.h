// The two process roles of an AFD deployment.
#pragma once

#include <optional>
#include <string_view>

namespace afd::transport {

enum class Role { kAttention, kFfn };

constexpr std::string_view roleName(Role role) { return role == Role::kAttention ? "attention" : "ffn"; }

constexpr std::optional<Role> parseRole(std::string_view name) {
    if (name == "attention") return Role::kAttention;
    if (name == "ffn") return Role::kFfn;
    return std::nullopt;
}

}  // namespace afd::transport
