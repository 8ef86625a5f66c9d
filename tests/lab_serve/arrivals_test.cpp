#include "lab/serve/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

namespace afd::lab {
namespace {

// Mean and coefficient of variation of the gaps between consecutive offsets.
std::pair<double, double> gapMeanAndCv(const std::vector<double>& offsets) {
    std::vector<double> gaps;
    for (size_t i = 1; i < offsets.size(); ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
    double squares = 0;
    for (const double g : gaps) squares += (g - mean) * (g - mean);
    return {mean, std::sqrt(squares / static_cast<double>(gaps.size())) / mean};
}

TEST(ArrivalOffsets, PoissonGapsHaveTheRateAndADispersionOfOne) {
    const auto offsets = arrivalOffsets(40000, 8.0, 1.0, 7);
    ASSERT_EQ(offsets.size(), 40000u);
    EXPECT_EQ(offsets[0], 0.0);
    for (size_t i = 1; i < offsets.size(); ++i) ASSERT_GE(offsets[i], offsets[i - 1]);
    const auto [mean, cv] = gapMeanAndCv(offsets);
    EXPECT_NEAR(mean, 1.0 / 8.0, 0.02 / 8.0);
    EXPECT_NEAR(cv, 1.0, 0.03);
}

TEST(ArrivalOffsets, BurstinessSetsTheDispersionNotTheRate) {
    for (const double burstiness : {0.25, 4.0}) {
        const auto [mean, cv] = gapMeanAndCv(arrivalOffsets(40000, 50.0, burstiness, 11));
        EXPECT_NEAR(mean, 1.0 / 50.0, 0.03 / 50.0) << burstiness;
        EXPECT_NEAR(cv, 1.0 / std::sqrt(burstiness), 0.05 / std::sqrt(burstiness)) << burstiness;
    }
}

TEST(ArrivalOffsets, InfiniteRateSendsEverythingAtOnce) {
    const auto offsets = arrivalOffsets(100, std::numeric_limits<double>::infinity(), 1.0, 1);
    ASSERT_EQ(offsets.size(), 100u);
    for (const double o : offsets) EXPECT_EQ(o, 0.0);
}

TEST(ArrivalOffsets, TheSeedFixesTheSchedule) {
    EXPECT_EQ(arrivalOffsets(50, 3.0, 1.0, 5), arrivalOffsets(50, 3.0, 1.0, 5));
    EXPECT_NE(arrivalOffsets(50, 3.0, 1.0, 5), arrivalOffsets(50, 3.0, 1.0, 6));
    EXPECT_TRUE(arrivalOffsets(0, 3.0, 1.0, 5).empty());
}

}  // namespace
}  // namespace afd::lab
