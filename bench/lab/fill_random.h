// A device-side random fill for the benchmarks: uniform bf16 values from a counter-based hash of (seed, index), so
// large weight sets are generated at memory speed and reproducibly. Host-only header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace afd::lab {

// Fills data [n] (device bf16) with uniform values in [-scale, scale) from (seed, index) on `stream`; returns the
// launch status.
cudaError_t launchFillRandomBf16(uint16_t* data, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace afd::lab
