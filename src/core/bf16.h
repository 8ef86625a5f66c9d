// bfloat16 storage type and conversions. Round-to-nearest-even; NaN stays NaN (quiet), infinities stay.
// Usable from host code and CUDA device code.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define AFD_HOST_DEVICE __host__ __device__
#else
#define AFD_HOST_DEVICE
#endif

namespace afd::core {

AFD_HOST_DEVICE inline float bf16BitsToFloat(uint16_t bits) {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float value;
#if defined(__CUDA_ARCH__)
    value = __uint_as_float(word);
#else
    std::memcpy(&value, &word, sizeof(value));
#endif
    return value;
}

AFD_HOST_DEVICE inline uint16_t floatToBf16Bits(float value) {
    uint32_t word;
#if defined(__CUDA_ARCH__)
    word = __float_as_uint(value);
#else
    std::memcpy(&word, &value, sizeof(word));
#endif
    if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
        // NaN: keep the sign and force a quiet-NaN payload so truncation cannot turn it into infinity.
        return static_cast<uint16_t>((word >> 16) | 0x0040u);
    }
    const uint32_t rounding_bias = 0x7fffu + ((word >> 16) & 1u);
    return static_cast<uint16_t>((word + rounding_bias) >> 16);
}

// A bf16 value as stored in checkpoints: 16 bits, no arithmetic of its own.
struct Bf16 {
    uint16_t bits = 0;

    Bf16() = default;
    AFD_HOST_DEVICE explicit Bf16(float value) : bits(floatToBf16Bits(value)) {}
    AFD_HOST_DEVICE static Bf16 fromBits(uint16_t raw) {
        Bf16 b;
        b.bits = raw;
        return b;
    }
    AFD_HOST_DEVICE float toFloat() const { return bf16BitsToFloat(bits); }
    AFD_HOST_DEVICE explicit operator float() const { return toFloat(); }
};
static_assert(sizeof(Bf16) == 2);

// Rounds a float to the nearest bf16 value and back (what storing in bf16 does to it).
AFD_HOST_DEVICE inline float roundToBf16(float value) { return bf16BitsToFloat(floatToBf16Bits(value)); }

}  // namespace afd::core
