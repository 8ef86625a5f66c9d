// The frames of the AFD data path, per mode (DESIGN.md §2), as segment specs. Both roles build them from the
// same numbers, so a disagreement shows up as a frame check failure naming the segment.
//   m2n A2F: hidden [rows, H] F32, local expert ids [rows, K] I32 (-1: not this rank's), weights [rows, K] F32
//   m2n F2A: partial sums [rows, H] F32
//   p2p A2F / F2A: hidden [rows, H] F32
// The TCP connector moves FP32 activations: the CPU engine computes in FP32, and dense and AFD runs then add
// the same numbers. Device connectors (cuda_ipc) move the GPU engine's BF16 hidden states as they are (A2F), and the
// FP32 sums back (F2A), so that an m2n attention rank adds its FFN ranks' partial sums unrounded:
//   m2n A2F: hidden [rows, H] BF16, local expert ids [rows, K] I32, weights [rows, K] F32
//   p2p A2F: hidden [rows, H] BF16;   F2A (both modes): [rows, H] F32
#pragma once

#include <cstdint>

#include "transport/frame.h"

namespace afd::transport {

inline FrameSpec m2nDispatchSpec(int64_t hidden, int64_t top_k) {
    return FrameSpec{{{core::DType::kF32, static_cast<uint32_t>(hidden)},
                      {core::DType::kI32, static_cast<uint32_t>(top_k)},
                      {core::DType::kF32, static_cast<uint32_t>(top_k)}}};
}

inline FrameSpec hiddenSpec(int64_t hidden) { return FrameSpec{{{core::DType::kF32, static_cast<uint32_t>(hidden)}}}; }

inline FrameSpec deviceM2nDispatchSpec(int64_t hidden, int64_t top_k) {
    return FrameSpec{{{core::DType::kBf16, static_cast<uint32_t>(hidden)},
                      {core::DType::kI32, static_cast<uint32_t>(top_k)},
                      {core::DType::kF32, static_cast<uint32_t>(top_k)}}};
}

inline FrameSpec deviceHiddenSpec(int64_t hidden) {
    return FrameSpec{{{core::DType::kBf16, static_cast<uint32_t>(hidden)}}};
}

}  // namespace afd::transport
