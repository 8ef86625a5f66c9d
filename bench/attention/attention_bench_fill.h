// Device-side fill of the attention benchmark's inputs (caches of up to tens of GB: filling them on the host would
// take longer than timing them).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace afd::bench {

// count bf16 values uniform in [-scale, scale), a hash of (seed, index); returns the launch status.
cudaError_t fillUniformBf16(uint16_t* dst, size_t count, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace afd::bench
