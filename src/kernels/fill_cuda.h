// Fills 32-bit words on the GPU with a value given at launch (a kernel argument, so that a graph replays the value it
// was captured with and an eager call needs no host buffer that outlives it). Includable by g++: streams are `void*`.
#pragma once

#include <cstdint>

namespace afd::kernels {

// dst[i] = value for i < count (device memory, 4-byte aligned). Asynchronous on `stream`; count 0 launches nothing.
void fillWords32Cuda(void* dst, uint32_t value, int64_t count, void* stream);

}  // namespace afd::kernels
