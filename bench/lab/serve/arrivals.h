// When `afd bench serve` sends each request: arrival times drawn as `vllm bench serve` draws them. Gaps between
// arrivals follow a gamma distribution with shape `burstiness` and mean 1 / rate: burstiness 1 is a Poisson process,
// below 1 burstier, above 1 more regular (the coefficient of variation of a gap is 1 / sqrt(burstiness)).
#pragma once

#include <cstdint>
#include <vector>

namespace afd::lab {

// Seconds from the start of the run at which each of `num_requests` requests arrives: the first at 0, each next one
// a gap later. `rate` in requests per second; infinity (or any non-finite rate) sends every request at 0.
// Deterministic for a given `seed`. Preconditions (AFD_CHECK): num_requests >= 0, rate > 0, burstiness > 0.
std::vector<double> arrivalOffsets(int64_t num_requests, double rate, double burstiness, uint64_t seed);

}  // namespace afd::lab
