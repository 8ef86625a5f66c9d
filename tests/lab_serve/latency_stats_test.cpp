#include "lab/serve/latency_stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace afd::lab {
namespace {

TEST(Percentile, InterpolatesBetweenRanksAsNumpy) {
    const std::vector<double> sorted = {1, 2, 3, 4, 10};
    EXPECT_DOUBLE_EQ(percentile(sorted, 0), 1);
    EXPECT_DOUBLE_EQ(percentile(sorted, 50), 3);
    EXPECT_DOUBLE_EQ(percentile(sorted, 100), 10);
    EXPECT_DOUBLE_EQ(percentile(sorted, 90), 7.6);   // numpy.percentile([1,2,3,4,10], 90)
    EXPECT_DOUBLE_EQ(percentile(sorted, 99), 9.76);  // rank 3.96
    EXPECT_DOUBLE_EQ(percentile({5}, 99), 5);
    EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(LatencyStats, MeanMedianStdAndPercentilesOfAnUnsortedSample) {
    const LatencyStats s = latencyStats({4, 1, 3, 2}, {25, 75});
    EXPECT_DOUBLE_EQ(s.mean, 2.5);
    EXPECT_DOUBLE_EQ(s.median, 2.5);
    EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(1.25));
    ASSERT_EQ(s.percentiles.size(), 2u);
    EXPECT_DOUBLE_EQ(s.percentiles[0], 1.75);
    EXPECT_DOUBLE_EQ(s.percentiles[1], 3.25);
}

TEST(LatencyStats, AnEmptySampleIsAllZeros) {
    const LatencyStats s = latencyStats({}, {99});
    EXPECT_EQ(s.mean, 0);
    EXPECT_EQ(s.median, 0);
    ASSERT_EQ(s.percentiles.size(), 1u);
    EXPECT_EQ(s.percentiles[0], 0);
}

}  // namespace
}  // namespace afd::lab
