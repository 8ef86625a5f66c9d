#include "core/status.h"

#include <gtest/gtest.h>

#include "core/check.h"

namespace afd::core {
namespace {

Result<int> parsePositive(int x) {
    if (x <= 0) return invalidArgument("value {} must be positive", x);
    return x * 2;
}

Result<int> doubled(int x) {
    AFD_ASSIGN_OR_RETURN(int y, parsePositive(x));
    return y + 1;
}

TEST(Status, OkAndError) {
    EXPECT_TRUE(Status::ok().isOk());
    Status s = notFound("tensor {} missing", "a.b");
    EXPECT_FALSE(s.isOk());
    EXPECT_EQ(s.code(), StatusCode::kNotFound);
    EXPECT_EQ(s.toString(), "not_found: tensor a.b missing");
    EXPECT_EQ(s.withContext("file x").message(), "file x: tensor a.b missing");
}

TEST(Result, ValueAndPropagation) {
    EXPECT_EQ(doubled(3).value(), 7);
    Result<int> bad = doubled(-1);
    ASSERT_FALSE(bad.isOk());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THROW((void)bad.value(), Error);
}

TEST(Result, OkStatusWithoutValueBecomesInternalError) {
    Result<int> r = Status::ok();
    EXPECT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Check, ThrowsWithMessage) {
    try {
        AFD_CHECK(1 + 1 == 3, "math is {}", "broken");
        FAIL() << "no throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("math is broken"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("1 + 1 == 3"), std::string::npos);
    }
}

}  // namespace
}  // namespace afd::core
