// Synthetic weights drawn on the GPU: the values model::synthetic writes into a checkpoint for the same (seed, tensor
// name) (model/synthetic_values.h has the formula), so `--random-weights` with a seed runs the very model `afd
// gen-model` writes with it, without a checkpoint, a host copy or a transfer. Includable by g++: no CUDA headers;
// streams are `void*` (a cudaStream_t, nullptr = the default stream).
//
// Both launchers check their arguments (AFD_CHECK), enqueue one kernel on `stream` without synchronising, and throw
// (AFD_CUDA_CHECK) on a launch error. All pointers are device pointers.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace afd::kernels {

// out[i] = model::syntheticValueBits(key, i, centre, half_width) for i in [0, count).
struct SyntheticFillParams {
    core::Bf16* out = nullptr;  // [count]; 2-byte aligned (16-byte aligned is fastest)
    int64_t count = 0;
    uint64_t key = 0;  // model::syntheticTensorKey(tensor name, seed)
    float centre = 0.0f;
    float half_width = 0.0f;
};
void syntheticFillCuda(const SyntheticFillParams& params, void* stream);

// The SwiGLU weights of num_experts MLPs (a MoE layer's routed experts, or a dense MLP as one expert), drawn straight
// into the layout moePackWeightsCuda writes (kernels/moe_cuda.h): each packed element gets the value of its source
// element, row r, column c of expert e's gate_proj / up_proj [inter, hidden] or down_proj [hidden, inter] (index
// r * columns + c of that tensor's stream), and the packing's zero padding stays zero. So the result is bit for bit
// moePackWeightsCuda of the row-major tensors that syntheticFillCuda (or gen-model) draws. Linear weights: centre 0.
struct SyntheticPackedMlpParams {
    int64_t num_experts = 0;
    int64_t hidden = 0;  // % 64 == 0
    int64_t inter = 0;   // >= 1: the tensors' width, packed at moePackedWidth(inter) (moe_cuda.h)
    // [num_experts, 3]: the keys of expert e's gate_proj, up_proj and down_proj (model::syntheticTensorKey).
    const uint64_t* keys = nullptr;
    float gate_up_half_width = 0.0f;   // gate_proj and up_proj: sqrt(3 / hidden) in gen-model
    float down_half_width = 0.0f;      // down_proj: sqrt(3 / inter)
    core::Bf16* w13_packed = nullptr;  // moePackedWeightBytes(num_experts, hidden, inter).w13 bytes, 16-byte aligned
    core::Bf16* w2_packed = nullptr;   // .w2 bytes, 16-byte aligned
};
void syntheticPackedMlpCuda(const SyntheticPackedMlpParams& params, void* stream);

}  // namespace afd::kernels
