// The argument block both q/k/v post-processing kernels read (qkv_rope.cu: rope_dim == head_dim; qkv_rope_padded.cu:
// heads stored padded), built from a checked QkvRopeParams (dense_cuda.h). Included by .cu files only.
#pragma once

#include <cstdint>

#include "kernels/dense_cuda.h"

namespace afd::kernels::cuda {

struct QkvRopeArgs {
    const void* qkv;  // bf16 or fp32 (the kernel's kF32In)
    const uint16_t* bias;
    const uint16_t* q_norm;
    const uint16_t* k_norm;
    const int32_t* positions;
    const float* rope_cos;  // [max_position, rope_dim / 2]
    const float* rope_sin;
    const int32_t* slot_mapping;
    uint16_t* q_out;
    uint16_t* k_cache;
    uint16_t* v_cache;
    int64_t max_position;
    int64_t num_slots;  // num_blocks * block_size
    int num_heads;
    int num_kv_heads;
    int head_dim;  // the stored heads' lanes
    int rope_dim;  // the model's head_dim (== head_dim unless the heads are stored padded)
    float eps;
};

inline QkvRopeArgs qkvRopeArgs(const QkvRopeParams& p) {
    QkvRopeArgs a;
    a.qkv = p.qkv;
    a.bias = reinterpret_cast<const uint16_t*>(p.qkv_bias);
    a.q_norm = reinterpret_cast<const uint16_t*>(p.q_norm);
    a.k_norm = reinterpret_cast<const uint16_t*>(p.k_norm);
    a.positions = p.positions;
    a.rope_cos = p.rope_cos;
    a.rope_sin = p.rope_sin;
    a.slot_mapping = p.slot_mapping;
    a.q_out = reinterpret_cast<uint16_t*>(p.q_out);
    a.k_cache = reinterpret_cast<uint16_t*>(p.k_cache);
    a.v_cache = reinterpret_cast<uint16_t*>(p.v_cache);
    a.max_position = p.max_position;
    a.num_slots = p.num_blocks * p.block_size;
    a.num_heads = static_cast<int>(p.num_heads);
    a.num_kv_heads = static_cast<int>(p.num_kv_heads);
    a.head_dim = static_cast<int>(p.head_dim);
    a.rope_dim = static_cast<int>(p.rope_dim > 0 ? p.rope_dim : p.head_dim);
    a.eps = p.eps;
    return a;
}

}  // namespace afd::kernels::cuda
