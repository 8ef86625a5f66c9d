// Summary statistics of a latency sample as `vllm bench serve` reports them: mean, median, standard deviation and
// percentiles by linear interpolation between the closest ranks (numpy.percentile's default).
#pragma once

#include <vector>

namespace afd::lab {

// The `p`-th percentile (p in [0, 100]) of `sorted` (ascending); 0 for an empty sample.
double percentile(const std::vector<double>& sorted, double p);

struct LatencyStats {
    double mean = 0;
    double median = 0;
    double stddev = 0;                // population standard deviation (numpy.std's default)
    std::vector<double> percentiles;  // one per requested percentile, in their order
};

// The stats of `values` (any order), with `percentiles` (each in [0, 100]); all zeros for an empty sample.
LatencyStats latencyStats(std::vector<double> values, const std::vector<double>& percentiles);

}  // namespace afd::lab
