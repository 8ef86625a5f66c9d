// The admin endpoints' access rule: a server bound to a loopback address is reachable from this host only and takes
// POST /stop (and other state-changing requests) from anyone there; a server bound to any other address needs a
// token, given by --admin-token or AFD_ADMIN_TOKEN, and such requests must carry "Authorization: Bearer <token>".
// A token given on loopback is required there too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "http/http_message.h"

namespace afd::http {

// The environment variable read when --admin-token is not given.
inline constexpr const char* kAdminTokenEnv = "AFD_ADMIN_TOKEN";

// Whether `host` (a bind address) reaches only this host: "localhost", 127.0.0.0/8, ::1 (also as
// ::ffff:127.x.y.z). Wildcards (0.0.0.0, ::, "") and every other name or address are not loopback.
bool isLoopbackHost(std::string_view host);

// The token the admin server on `host` requires: the flag when given, else $AFD_ADMIN_TOKEN, else none (empty).
// kInvalidArgument naming --admin-token and AFD_ADMIN_TOKEN when `host` is not loopback and there is no token, or
// when the token given is empty.
core::Result<std::string> resolveAdminToken(std::string_view host, const std::optional<std::string>& flag_token);

// nullopt when `request` may proceed: `token` is empty, or the request carries "Authorization: Bearer <token>";
// else the 401 reply to send (with WWW-Authenticate: Bearer). The comparison takes the same time wherever the
// tokens differ.
std::optional<HttpReply> checkBearerToken(const HttpRequest& request, const std::string& token);

}  // namespace afd::http
