#include "core/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace afd::core {
namespace {

uint32_t bitsOf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float fromBits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Independent reference: pick the nearer of the two neighbouring bf16 values, ties to even mantissa.
uint16_t referenceRound(float f) {
    const uint32_t u = bitsOf(f);
    const uint16_t lo = static_cast<uint16_t>(u >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double dlo = std::fabs(static_cast<double>(bf16BitsToFloat(lo)) - f);
    // Past the largest finite bf16 the next value is infinity, which IEEE rounding treats as 2^128.
    const double hi_value = std::isinf(bf16BitsToFloat(hi)) ? std::copysign(std::ldexp(1.0, 128), f)
                                                            : static_cast<double>(bf16BitsToFloat(hi));
    const double dhi = std::fabs(hi_value - f);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

TEST(Bf16, ExactValuesRoundTrip) {
    for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65280.0f, 1e-30f}) {
        const float r = roundToBf16(f);
        EXPECT_EQ(roundToBf16(r), r);
    }
    EXPECT_EQ(floatToBf16Bits(1.0f), 0x3f80);
    EXPECT_EQ(floatToBf16Bits(-2.0f), 0xc000);
}

TEST(Bf16, RoundsToNearestEven) {
    // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: ties to even gives 1.
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3f808000u)), 0x3f80);
    // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): ties to even rounds up.
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3f818000u)), 0x3f82);
    // Just above the tie rounds up.
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3f808001u)), 0x3f81);
}

TEST(Bf16, MatchesReferenceOnRandomFloats) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> dist;
    for (int i = 0; i < 200000; ++i) {
        const uint32_t u = dist(rng);
        const float f = fromBits(u);
        if (std::isnan(f) || std::isinf(f)) continue;
        // Values that round past the largest finite bf16 become infinity; the reference handles them too.
        ASSERT_EQ(floatToBf16Bits(f), referenceRound(f)) << std::hex << u;
    }
}

TEST(Bf16, NanStaysNanAndInfinityStays) {
    const float nan_small_payload = fromBits(0x7f800001u);  // would truncate to infinity
    EXPECT_TRUE(std::isnan(bf16BitsToFloat(floatToBf16Bits(nan_small_payload))));
    EXPECT_TRUE(std::isnan(bf16BitsToFloat(floatToBf16Bits(-std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(floatToBf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(floatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xff80);
    EXPECT_EQ(floatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to +inf
}

}  // namespace
}  // namespace afd::core
