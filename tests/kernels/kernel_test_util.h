// Random inputs and error measures for kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"

namespace afd::kernels::testing {

inline std::vector<float> randomFloats(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

inline std::vector<core::Bf16> randomBf16(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<core::Bf16> v(n);
    for (auto& x : v) x = core::Bf16(dist(rng));
    return v;
}

// ||a - b|| / ||b|| in double.
inline double relL2(const std::vector<float>& a, const std::vector<double>& b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace afd::kernels::testing
