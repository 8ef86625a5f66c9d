#include "lab/serve/arrivals.h"

#include <cmath>
#include <random>

#include "core/check.h"

namespace afd::lab {

std::vector<double> arrivalOffsets(int64_t num_requests, double rate, double burstiness, uint64_t seed) {
    AFD_CHECK(num_requests >= 0, "arrivalOffsets: num_requests {} is negative", num_requests);
    AFD_CHECK(rate > 0, "arrivalOffsets: rate {} must be positive", rate);
    AFD_CHECK(burstiness > 0 && std::isfinite(burstiness), "arrivalOffsets: burstiness {} must be positive",
              burstiness);
    std::vector<double> offsets(static_cast<size_t>(num_requests), 0.0);
    if (!std::isfinite(rate)) return offsets;
    std::mt19937_64 rng(seed);
    // Mean gap shape * scale = 1 / rate.
    std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
    for (size_t i = 1; i < offsets.size(); ++i) offsets[i] = offsets[i - 1] + gap(rng);
    return offsets;
}

}  // namespace afd::lab
