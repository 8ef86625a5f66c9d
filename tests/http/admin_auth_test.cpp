#include "http/admin_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "http/http_client.h"
#include "http/http_server.h"

namespace afd::http {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Sets (or unsets) AFD_ADMIN_TOKEN for one test and restores it.
class ScopedTokenEnv {
public:
    explicit ScopedTokenEnv(const char* value) {
        if (const char* old = std::getenv(kAdminTokenEnv)) old_ = old;
        if (value != nullptr) {
            ::setenv(kAdminTokenEnv, value, 1);
        } else {
            ::unsetenv(kAdminTokenEnv);
        }
    }
    ~ScopedTokenEnv() {
        if (old_) {
            ::setenv(kAdminTokenEnv, old_->c_str(), 1);
        } else {
            ::unsetenv(kAdminTokenEnv);
        }
    }

private:
    std::optional<std::string> old_;
};

HttpRequest requestWith(std::optional<std::string> authorization) {
    HttpRequest r;
    r.method = "POST";
    r.path = "/stop";
    if (authorization) r.headers.emplace_back("authorization", *authorization);
    return r;
}

TEST(AdminAuth, LoopbackHosts) {
    for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"}) {
        EXPECT_TRUE(isLoopbackHost(host)) << host;
    }
    for (const char* host : {"0.0.0.0", "::", "", "10.0.0.5", "192.168.1.1", "example.com", "128.0.0.1",
                             "::ffff:10.0.0.1", "127.0.0.1.example.com"}) {
        EXPECT_FALSE(isLoopbackHost(host)) << host;
    }
}

TEST(AdminAuth, ATokenIsRequiredOffLoopbackOnly) {
    ScopedTokenEnv unset(nullptr);
    auto none = resolveAdminToken("127.0.0.1", std::nullopt);
    ASSERT_TRUE(none.isOk());
    EXPECT_EQ(*none, "");
    const auto refused = resolveAdminToken("0.0.0.0", std::nullopt);
    EXPECT_EQ(refused.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), AllOf(HasSubstr("--admin-host 0.0.0.0 is not a loopback address"),
                                                  HasSubstr("--admin-token"), HasSubstr("AFD_ADMIN_TOKEN")));
    auto flag = resolveAdminToken("0.0.0.0", std::string("s3cret"));
    ASSERT_TRUE(flag.isOk());
    EXPECT_EQ(*flag, "s3cret");
    // A token given on loopback is kept (and then required).
    auto loopback = resolveAdminToken("127.0.0.1", std::string("s3cret"));
    ASSERT_TRUE(loopback.isOk());
    EXPECT_EQ(*loopback, "s3cret");
    EXPECT_THAT(resolveAdminToken("127.0.0.1", std::string()).status().message(), HasSubstr("--admin-token is empty"));
}

TEST(AdminAuth, TheEnvironmentGivesTheTokenAndTheFlagWins) {
    ScopedTokenEnv set("from-env");
    auto env = resolveAdminToken("10.0.0.5", std::nullopt);
    ASSERT_TRUE(env.isOk()) << env.status().toString();
    EXPECT_EQ(*env, "from-env");
    auto flag = resolveAdminToken("10.0.0.5", std::string("from-flag"));
    ASSERT_TRUE(flag.isOk());
    EXPECT_EQ(*flag, "from-flag");
    ScopedTokenEnv empty("");
    EXPECT_THAT(resolveAdminToken("10.0.0.5", std::nullopt).status().message(), HasSubstr("AFD_ADMIN_TOKEN is empty"));
}

TEST(AdminAuth, BearerTokens) {
    EXPECT_FALSE(checkBearerToken(requestWith(std::nullopt), "").has_value());  // no token: open
    EXPECT_FALSE(checkBearerToken(requestWith("Bearer s3cret"), "s3cret").has_value());
    EXPECT_FALSE(checkBearerToken(requestWith("bearer s3cret"), "s3cret").has_value());  // the scheme's case is free
    for (const auto& header : std::vector<std::optional<std::string>>{
             std::nullopt, "Bearer wrong", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret", "Bearer "}) {
        const std::optional<HttpReply> reply = checkBearerToken(requestWith(header), "s3cret");
        ASSERT_TRUE(reply.has_value()) << header.value_or("(none)");
        EXPECT_EQ(reply->status, 401);
        ASSERT_EQ(reply->headers.size(), 1u);
        EXPECT_EQ(reply->headers[0].first, "WWW-Authenticate");
    }
}

TEST(AdminAuth, AClientSendsItsHeadersAndAServerChecksThem) {
    HttpServer server;
    server.addRoute("POST", "/stop", [](const HttpRequest& request) {
        if (auto refused = checkBearerToken(request, "s3cret")) return *refused;
        return HttpReply::json(200, "{\"stopping\":true}");
    });
    ASSERT_TRUE(server.start().isOk());
    auto without = HttpClient("127.0.0.1", server.port()).post("/stop", "");
    ASSERT_TRUE(without.isOk()) << without.status().toString();
    EXPECT_EQ(without->status, 401);
    EXPECT_THAT(without->body, HasSubstr("Authorization: Bearer"));
    HttpClientOptions options;
    options.headers = {{"Authorization", "Bearer s3cret"}};
    auto with = HttpClient("127.0.0.1", server.port(), options).post("/stop", "");
    ASSERT_TRUE(with.isOk()) << with.status().toString();
    EXPECT_EQ(with->status, 200);
    options.headers = {{"Authorization", "Bearer s3cret\r\nX-Evil: 1"}};
    EXPECT_EQ(HttpClient("127.0.0.1", server.port(), options).post("/stop", "").status().code(),
              core::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace afd::http
