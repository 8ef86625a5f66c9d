// The expert weights in the CUDA layer's packed layout (moe_cuda.h, moePackWeightsCuda): every 64-row x 64-column
// block is 8 KB of contiguous memory (the row-major matrices hold it as 64 pieces of 128 bytes, each in its own weight
// row, 4 KB apart in w13), and the blocks of one k-block follow each other unit after unit, so that the stage of a
// grouped GEMM item (its consecutive units at one k-block: 4 blocks in tall128) is one run of contiguous memory.
//
//   w13 packed [E][ceil(H / 64) k-blocks][ceil(I / 32) units][64 rows][64]: row r of unit u is gate (r / 8 odd: up)
//       row u * 32 + (r / 16) * 8 + r % 8 of the expert, the 8-row interleave the gate-up consumers' SwiGLU pairs.
//   w2 packed  [E][ceil(I / 64) k-blocks][H / 64 units][64 rows][64]: row r of unit u is hidden row u * 64 + r.
// Columns past the reduction length are zero, and so are the gate/up rows past I (an I that is not a multiple of 32
// packed at its packed width, moe_cuda.h's moePackedWidth).
//
// Why one run per stage: one SM reads DRAM by TMA at 66 GB/s in 32 KiB copies but at 35 GB/s in four 8 KiB pieces
// 256 KiB apart, the previous (unit-major) layout's stage (`afd bench stream --pieces 1,4`, 66 of 132 SMs; with all
// 132 streaming, 4.70 against 4.64 TB/s); the layer with this layout: T = 1 3 % and T = 256 1-3 % faster.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_stages.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kBlockK = 64;
constexpr int kBlockRows = 64;
constexpr int kChunk = 8;  // bf16 values per 16-byte copy

// w13's 64-row units (32 gate and 32 up rows each) of an MLP of width `inter`.
int64_t gateUpUnits(int64_t inter) { return (inter + 31) / 32; }

// One thread per 16-byte chunk of the packed matrix: `gate_up` selects w13's row interleave. src rows have `cols`
// values (the reduction length); the packed matrix has k_blocks x units blocks per expert; `inter` is the source's
// width (w13's gate/up rows past it are zero).
__global__ void packWeightsKernel(const uint16_t* src, uint16_t* dst, int64_t experts, int64_t units, int64_t k_blocks,
                                  int64_t cols, int64_t inter, bool gate_up) {
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
        bool row_valid = true;
        if (gate_up) {
            const int64_t up = (row / 8) % 2;
            const int64_t expert_row = unit * 32 + (row / 16) * 8 + row % 8;
            row_valid = expert_row < inter;
            src_row = expert * 2 * inter + up * inter + expert_row;
        } else {
            src_row = expert * units * kBlockRows + unit * kBlockRows + row;
        }
        const int64_t col = kb * kBlockK + chunk_in_row * kChunk;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (row_valid && col < cols) {
            const uint16_t* from = src + src_row * cols + col;
            if (cols % kChunk == 0) {  // 16-byte aligned, and the chunk wholly inside the row
                value = *reinterpret_cast<const uint4*>(from);
            } else {  // a width not a multiple of 8 (down_proj's rows): value by value, zero past the row
                uint16_t v[kChunk];
#pragma unroll
                for (int j = 0; j < kChunk; ++j) {
                    v[j] = col + j < cols ? from[j] : uint16_t{0};
                }
                value = make_uint4(v[0] | (uint32_t{v[1]} << 16), v[2] | (uint32_t{v[3]} << 16),
                                   v[4] | (uint32_t{v[5]} << 16), v[6] | (uint32_t{v[7]} << 16));
            }
        }
        reinterpret_cast<uint4*>(dst)[i] = value;
    }
}

cudaError_t launchPack(const uint16_t* src, uint16_t* dst, int64_t experts, int64_t units, int64_t cols, int64_t inter,
                       bool gate_up, cudaStream_t stream) {
    const int64_t k_blocks = (cols + kBlockK - 1) / kBlockK;
    const int64_t chunks = experts * units * k_blocks * (kBlockRows * kBlockK / kChunk);
    if (chunks == 0) {
        return cudaSuccess;
    }
    const int64_t blocks = (chunks + 255) / 256;
    packWeightsKernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
        src, dst, experts, units, k_blocks, cols, inter, gate_up);
    return cudaGetLastError();
}

}  // namespace

size_t packedGateUpElements(int64_t experts, int64_t hidden, int64_t inter) {
    return static_cast<size_t>(experts * gateUpUnits(inter) * ((hidden + kBlockK - 1) / kBlockK) * kBlockRows *
                               kBlockK);
}

size_t packedDownElements(int64_t experts, int64_t hidden, int64_t inter) {
    return static_cast<size_t>(experts * (hidden / kBlockRows) * ((inter + kBlockK - 1) / kBlockK) * kBlockRows *
                               kBlockK);
}

cudaError_t launchMoePackWeights(const MoePackWeightsParams& p, cudaStream_t stream) {
    const cudaError_t err =
        launchPack(p.w13, p.w13_packed, p.experts, gateUpUnits(p.inter), p.hidden, p.inter, true, stream);
    if (err != cudaSuccess) {
        return err;
    }
    return launchPack(p.w2, p.w2_packed, p.experts, p.hidden / kBlockRows, p.inter, p.inter, false, stream);
}

}  // namespace afd::kernels::cuda
