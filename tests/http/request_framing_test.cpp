#include "http/request_framing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace afd::http {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLimit = 1000;

std::optional<HttpRejection> check(const std::vector<std::string_view>& lengths, bool transfer_encoding = false,
                                   uint64_t* body_bytes = nullptr) {
    uint64_t bytes = 12345;
    std::optional<HttpRejection> rejection = checkRequestFraming(lengths, transfer_encoding, kLimit, bytes);
    if (body_bytes != nullptr) *body_bytes = bytes;
    return rejection;
}

TEST(RequestFraming, AcceptsDeclaredLengthsUpToTheLimit) {
    uint64_t bytes = 0;
    EXPECT_FALSE(check({}, false, &bytes));
    EXPECT_EQ(bytes, 0u);
    EXPECT_FALSE(check({"0"}, false, &bytes));
    EXPECT_EQ(bytes, 0u);
    EXPECT_FALSE(check({"1000"}, false, &bytes));
    EXPECT_EQ(bytes, 1000u);
    EXPECT_FALSE(check({"0012", "0012"}, false, &bytes));  // repeated with the same value
    EXPECT_EQ(bytes, 12u);
}

TEST(RequestFraming, RefusesWhatCannotBeFramed) {
    for (const std::string_view bad : {"", "ten", "-1", "+5", "1 2", "1,1", "0x10", " 5", "5 "}) {
        const auto rejection = check({bad});
        ASSERT_TRUE(rejection) << "'" << bad << "'";
        EXPECT_EQ(rejection->status, 400) << "'" << bad << "'";
    }
    const auto twice = check({"1", "2"});
    ASSERT_TRUE(twice);
    EXPECT_EQ(twice->status, 400);
    EXPECT_THAT(twice->message, HasSubstr("twice"));

    const auto over = check({"1001"});
    ASSERT_TRUE(over);
    EXPECT_EQ(over->status, 413);
    EXPECT_THAT(over->message, HasSubstr("1001"));
    const auto huge = check({"99999999999999999999999999"});  // beyond 64 bits: still just too large
    ASSERT_TRUE(huge);
    EXPECT_EQ(huge->status, 413);

    const auto chunked = check({}, true);
    ASSERT_TRUE(chunked);
    EXPECT_EQ(chunked->status, 501);
    EXPECT_EQ(check({"5"}, true)->status, 501);
}

}  // namespace
}  // namespace afd::http
