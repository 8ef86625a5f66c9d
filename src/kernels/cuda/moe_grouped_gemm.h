// Internal launch interface of the grouped expert GEMMs (moe_grouped_gemm.cuh), shared by the host code in
// moe_cuda.cpp and the per-configuration .cu files. Host-only header (includes the CUDA driver types).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe_cuda.h"

namespace afd::kernels::cuda {

// Arguments of one grouped GEMM launch (device pointers; shapes in elements).
//   gate-up: out = h [slots, I], b_src = x [T, H] gathered through slot_token, A = w13 (map rows [E * 2I, H])
//   down:    out = y [slots, H], b_src = h [slots, I] read in slot order,    A = w2  (map rows [E * H, I])
struct GroupedGemmArgs {
    const uint16_t* b_src = nullptr;     // bf16 activations, rows of b_ld elements
    const int32_t* slot_token = nullptr;  // [slots] token of each slot (gate-up only)
    const int32_t* slot_offset = nullptr;  // [E + 1]
    const int32_t* tile_offset = nullptr;  // [E + 1] token-tile prefix for the config's tile of tokens
    uint16_t* out = nullptr;               // bf16, rows of out_ld elements
    int num_experts = 0;
    int k = 0;          // reduction length: H (gate-up) or I (down)
    int b_ld = 0;       // row stride of b_src
    int out_ld = 0;     // row stride of out
    int inter = 0;      // I: gate-up rows of an expert are [0, I), up rows [I, 2I)
    int a_rows = 0;     // weight rows of one expert in the map: 2I (gate-up) or H (down)
    int n_tiles = 0;    // weight-row tiles per expert
};

// Static shape of a tile configuration.
struct TileShape {
    int consumers;     // consumer warpgroups (1 or 2); each owns 64 weight rows of the item
    int block_tokens;  // most tokens of one item
    int stages;        // pipeline depth
};
// NOTE: the .cu file of each configuration instantiates its kernels from these constants.
inline constexpr TileShape kSmall16Shape{1, 16, 10};
inline constexpr TileShape kSmall32Shape{1, 32, 8};
inline constexpr TileShape kSmall64Shape{1, 64, 6};
inline constexpr TileShape kSmall128Shape{1, 128, 4};
inline constexpr TileShape kWide128Shape{2, 128, 6};
inline constexpr TileShape kWide256Shape{2, 256, 4};
TileShape tileShape(MoeTileConfig config);

// Output columns one item covers: gate-up 32 * consumers intermediate columns, down 64 * consumers hidden rows.
inline int gateUpColumnsPerItem(const TileShape& s) { return 32 * s.consumers; }
inline int downRowsPerItem(const TileShape& s) { return 64 * s.consumers; }

// Launches the persistent gate-up (gate_up) or down kernel of a configuration on `stream` (one .cu file each);
// returns the launch status. `tmap` describes the weight matrix with box {64, 8} (gate-up) or
// {64, 64 * consumers} (down), bf16, 128-byte swizzle. `sm_count` sizes the persistent grid.
#define AFD_DECLARE_GROUPED_GEMM(name)                                                                        \
    cudaError_t launchGroupedGemm##name(bool gate_up, const CUtensorMap& tmap, const GroupedGemmArgs& args,   \
                                        int sm_count, cudaStream_t stream, bool programmatic)
AFD_DECLARE_GROUPED_GEMM(Small16);
AFD_DECLARE_GROUPED_GEMM(Small32);
AFD_DECLARE_GROUPED_GEMM(Small64);
AFD_DECLARE_GROUPED_GEMM(Small128);
AFD_DECLARE_GROUPED_GEMM(Wide128);
AFD_DECLARE_GROUPED_GEMM(Wide256);
#undef AFD_DECLARE_GROUPED_GEMM

}  // namespace afd::kernels::cuda
