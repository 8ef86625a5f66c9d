#include "http/admin_auth.h"

#include <arpa/inet.h>
#include <strings.h>

#include <algorithm>
#include <cstring>

#include "core/env.h"

namespace afd::http {
namespace {

// Compares all of both strings whatever their first difference is, so that the time taken tells nothing about it.
bool sameBytes(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

}  // namespace

bool isLoopbackHost(std::string_view host) {
    if (host == "localhost") return true;
    std::string text(host);
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
    in_addr v4{};
    if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
        return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
    }
    return false;
}

core::Result<std::string> resolveAdminToken(std::string_view host, const std::optional<std::string>& flag_token) {
    std::optional<std::string> token = flag_token;
    std::string_view source = "--admin-token";
    if (!token) {
        token = core::envString(kAdminTokenEnv);
        source = kAdminTokenEnv;
    }
    if (token && token->empty()) {
        return core::invalidArgument("{} is empty: give a non-empty admin token or none", source);
    }
    if (!token && !isLoopbackHost(host)) {
        return core::invalidArgument(
            "--admin-host {} is not a loopback address: POST /stop needs a token there; pass --admin-token TOKEN or "
            "set {} (clients send \"Authorization: Bearer TOKEN\")",
            host, kAdminTokenEnv);
    }
    return token.value_or(std::string());
}

std::optional<HttpReply> checkBearerToken(const HttpRequest& request, const std::string& token) {
    if (token.empty()) return std::nullopt;
    constexpr std::string_view kScheme = "Bearer ";
    const std::string* header = request.header("authorization");
    if (header != nullptr && header->size() > kScheme.size() &&
        strncasecmp(header->data(), kScheme.data(), kScheme.size()) == 0 &&
        sameBytes(std::string_view(*header).substr(kScheme.size()), token)) {
        return std::nullopt;
    }
    HttpReply reply =
        HttpReply::error(401, header == nullptr ? "this endpoint needs \"Authorization: Bearer <admin token>\""
                                                : "the admin token does not match");
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
    return reply;
}

}  // namespace afd::http
