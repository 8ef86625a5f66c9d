#include "lab/serve/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace afd::lab {

double percentile(const std::vector<double>& sorted, double p) {
    AFD_CHECK(p >= 0 && p <= 100, "percentile: {} is outside [0, 100]", p);
    if (sorted.empty()) return 0;
    const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
    const auto below = static_cast<size_t>(std::floor(rank));
    const size_t above = std::min(below + 1, sorted.size() - 1);
    const double fraction = rank - static_cast<double>(below);
    return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

LatencyStats latencyStats(std::vector<double> values, const std::vector<double>& percentiles) {
    LatencyStats stats;
    stats.percentiles.assign(percentiles.size(), 0.0);
    if (values.empty()) return stats;
    std::sort(values.begin(), values.end());
    const auto n = static_cast<double>(values.size());
    stats.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
    double squares = 0;
    for (const double v : values) squares += (v - stats.mean) * (v - stats.mean);
    stats.stddev = std::sqrt(squares / n);
    stats.median = percentile(values, 50);
    for (size_t i = 0; i < percentiles.size(); ++i) stats.percentiles[i] = percentile(values, percentiles[i]);
    return stats;
}

}  // namespace afd::lab
