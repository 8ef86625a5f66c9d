// The element values of a synthetic checkpoint (synthetic.h), as one formula that host code and CUDA kernels share, so
// that weights drawn on a GPU (kernels/device_random.h) are bit for bit the ones `afd gen-model` writes for the same
// seed. Includable by nvcc: no fmt, no standard library beyond <cstdint>.
//
// Element i of a tensor with key k (syntheticTensorKey: the tensor name hashed with the seed) is
//   bf16(centre + float(u) * half_width),  u = 2 * (mix(s) >> 11) / 2^53 - 1 in [-1, 1),
//   s = (k ^ (i / 2^16) * 0xd1b54a32d192ed03) + (i % 2^16 + 1) * 0x9e3779b97f4a7c15   (mod 2^64),
// mix being splitmix64's finaliser: each chunk of 2^16 elements is one splitmix64 stream, so chunks (and, from the
// closed form, elements) are independent of one another and of how the work is split.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace afd::model {

inline constexpr int64_t kSyntheticChunkElements = int64_t{1} << 16;

AFD_HOST_DEVICE inline uint64_t syntheticMix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

AFD_HOST_DEVICE inline uint16_t syntheticValueBits(uint64_t key, int64_t index, float centre, float half_width) {
    const auto chunk = static_cast<uint64_t>(index / kSyntheticChunkElements);
    const auto step = static_cast<uint64_t>(index % kSyntheticChunkElements) + 1;
    const uint64_t z = syntheticMix((key ^ (chunk * 0xd1b54a32d192ed03ull)) + step * 0x9e3779b97f4a7c15ull);
    // Exact in double: a 53-bit integer scaled by a power of two, minus one.
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;
#if defined(__CUDA_ARCH__)
    // Rounded multiply then rounded add, as the host computes it (no contraction into an FMA).
    const float value = __fadd_rn(centre, __fmul_rn(__double2float_rn(u), half_width));
#else
    const float value = centre + static_cast<float>(u) * half_width;
#endif
    return core::floatToBf16Bits(value);
}

}  // namespace afd::model
