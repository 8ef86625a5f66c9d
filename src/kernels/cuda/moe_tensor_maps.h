// TMA tensor maps of the grouped GEMMs (cuTensorMapEncodeTiled, reached through the runtime's driver entry point):
// the packed expert weights and the token rows in slot order. Host-only; throws core::Error when the driver cannot
// encode a map.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/moe_cuda_plan.h"

namespace afd::kernels::cuda {

// The 5-D view (k, row, 64-row unit, k-block, expert) of packed weights (moePackWeightsCuda) whose box
// {64, 64, box_units, 1, 1} lands an item's `box_units` blocks of 64 rows for one k-block, one run of contiguous
// memory: shared-memory row 64 u + r is weight row r of the item's u-th unit (moe_gemm_producer.cuh). No L2 promotion:
// the weights stream from DRAM about once per layer.
CUtensorMap packedWeightMap(const core::Bf16* base, int64_t experts, int64_t units, int64_t k_blocks,
                            uint32_t box_units);

// A row-major bf16 matrix of token rows [rows, cols] (x_sorted, h) in boxes of 64 columns x box_rows rows, 128-byte
// swizzle, 256-byte L2 promotion: every weight tile of the rows' expert reads them again. (With row-major weights a
// 256-byte promotion of each 128-byte weight row also fetched the next stage's and measured 1-3 % slower.)
CUtensorMap tokenRowsMap(const void* base, int64_t rows, int64_t cols, uint32_t box_rows);

// Rows of one token TMA box (moe_gemm_producer.cuh issues as many as an item needs; tiles over 256 tokens load boxes
// of 96 rows, Layout::kTokenBoxRows), and of the one box of an item that fills its tile (up to 256 tokens).
uint32_t tokenBoxRows(const MoeTileShape& s);
uint32_t fullTokenBoxRows(const MoeTileShape& s);

}  // namespace afd::kernels::cuda
