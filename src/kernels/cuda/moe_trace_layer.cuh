// Stamps of the permute and combine kernels for `afd bench moe --timeline` (MoeTraceLayerWord): each CTA folds its
// times into the layer words with atomicMax, an earliest time as its complement so that zero still means none.
#pragma once

#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"
#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {

// Now, as the earliest of word's stamps (the word holds ~t). layer: the trace's layer words, or nullptr.
__device__ __forceinline__ void traceLayerFirst(uint64_t* layer, int word) {
    if (layer != nullptr) {
        atomicMax(reinterpret_cast<unsigned long long*>(layer + word), ~sm90::globalTimer());
    }
}

// Now, as the latest of word's stamps.
__device__ __forceinline__ void traceLayerLast(uint64_t* layer, int word) {
    if (layer != nullptr) {
        atomicMax(reinterpret_cast<unsigned long long*>(layer + word), sm90::globalTimer());
    }
}

}  // namespace afd::kernels::cuda
