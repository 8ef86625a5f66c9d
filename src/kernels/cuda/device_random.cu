// Synthetic weights on the device (kernels/device_random.h): every element is model::syntheticValueBits of its index
// in its source tensor, a pure function of (key, index), so threads draw any elements in any order. One thread draws
// 8 consecutive elements and stores them as one 16-byte chunk.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_random_stages.h"
#include "model/synthetic_values.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8;  // bf16 values per 16-byte store
constexpr int64_t kMaxBlocks = 65536;

// The packed layout of moe_pack_weights.cu: [experts][k-blocks of 64 reduction columns][units][64 rows][64 columns].
constexpr int kBlockK = 64;
constexpr int kBlockRows = 64;

unsigned gridFor(int64_t items) {
    const int64_t blocks = (items + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ inline uint32_t pack2(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (uint32_t{hi} << 16); }

// Values [first, first + 8) of a tensor's stream, zero from `valid` on.
__device__ inline uint4 drawChunk(uint64_t key, int64_t first, int valid, float centre, float half_width) {
    uint16_t v[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
        v[j] = j < valid ? model::syntheticValueBits(key, first + j, centre, half_width) : uint16_t{0};
    }
    return make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
}

__global__ void syntheticFillKernel(uint16_t* out, int64_t count, uint64_t key, float centre, float half_width) {
    // The first chunk starts at the first 16-byte boundary of out; the elements before it (head) and after the last
    // whole chunk (tail) are drawn one by one.
    const auto misalignment = static_cast<int64_t>((reinterpret_cast<uintptr_t>(out) % 16) / 2);
    const int64_t head = misalignment == 0 ? 0 : (count < kChunk - misalignment ? count : kChunk - misalignment);
    const int64_t chunks = (count - head) / kChunk;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    for (int64_t c = tid; c < chunks; c += stride) {
        const int64_t first = head + c * kChunk;
        *reinterpret_cast<uint4*>(out + first) = drawChunk(key, first, kChunk, centre, half_width);
    }
    for (int64_t i = tid; i < head; i += stride) out[i] = model::syntheticValueBits(key, i, centre, half_width);
    for (int64_t i = head + chunks * kChunk + tid; i < count; i += stride) {
        out[i] = model::syntheticValueBits(key, i, centre, half_width);
    }
}

// One thread per 16-byte chunk of a packed matrix (as moe_pack_weights.cu's packWeightsKernel, with the source
// element drawn instead of loaded). gate_up: w13 (row r of unit u is gate (r / 8 odd: up) row u * 32 + (r / 16) * 8 +
// r % 8, key j = 0 or 1; rows from `rows` on are zero); else w2 (row r of unit u is hidden row u * 64 + r of
// down_proj, key j = 2).
__global__ void syntheticPackedKernel(const uint64_t* keys, uint16_t* dst, int64_t experts, int64_t units,
                                      int64_t k_blocks, int64_t cols, int64_t rows, bool gate_up, float half_width) {
    const int64_t chunks_per_block = kBlockRows * kBlockK / kChunk;
    const int64_t total = experts * units * k_blocks * chunks_per_block;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t chunk_in_row = i % (kBlockK / kChunk);
        const int64_t row = (i / (kBlockK / kChunk)) % kBlockRows;
        const int64_t block = i / chunks_per_block;  // (expert, k-block, unit)
        const int64_t unit = block % units;
        const int64_t kb = (block / units) % k_blocks;
        const int64_t expert = block / (k_blocks * units);
        int64_t src_row;
        int which;
        if (gate_up) {
            which = static_cast<int>((row / 8) % 2);
            src_row = unit * 32 + (row / 16) * 8 + row % 8;
        } else {
            which = 2;
            src_row = unit * kBlockRows + row;
        }
        const int64_t col = kb * kBlockK + chunk_in_row * kChunk;
        const int64_t left = src_row < rows ? cols - col : 0;
        const int valid = left <= 0 ? 0 : (left < kChunk ? static_cast<int>(left) : kChunk);
        const uint64_t key = keys[expert * 3 + which];
        reinterpret_cast<uint4*>(dst)[i] = drawChunk(key, src_row * cols + col, valid, 0.0f, half_width);
    }
}

cudaError_t launchPacked(const uint64_t* keys, uint16_t* dst, int64_t experts, int64_t units, int64_t cols,
                         int64_t rows, bool gate_up, float half_width, cudaStream_t stream) {
    const int64_t k_blocks = (cols + kBlockK - 1) / kBlockK;
    const int64_t chunks = experts * units * k_blocks * (kBlockRows * kBlockK / kChunk);
    if (chunks == 0) return cudaSuccess;
    syntheticPackedKernel<<<gridFor(chunks), kThreads, 0, stream>>>(keys, dst, experts, units, k_blocks, cols, rows,
                                                                    gate_up, half_width);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launchSyntheticFill(uint16_t* out, int64_t count, uint64_t key, float centre, float half_width,
                                cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    syntheticFillKernel<<<gridFor((count + kChunk - 1) / kChunk), kThreads, 0, stream>>>(out, count, key, centre,
                                                                                         half_width);
    return cudaGetLastError();
}

cudaError_t launchSyntheticPackedMlp(const uint64_t* keys, int64_t experts, int64_t hidden, int64_t inter,
                                     float gate_up_half_width, float down_half_width, uint16_t* w13_packed,
                                     uint16_t* w2_packed, cudaStream_t stream) {
    // w13 at the packed width (units of 32 gate and 32 up rows; the rows past `inter` zero), w2 over `inter` columns.
    const cudaError_t err =
        launchPacked(keys, w13_packed, experts, (inter + 31) / 32, hidden, inter, true, gate_up_half_width, stream);
    if (err != cudaSuccess) return err;
    return launchPacked(keys, w2_packed, experts, hidden / kBlockRows, inter, hidden, false, down_half_width, stream);
}

}  // namespace afd::kernels::cuda
