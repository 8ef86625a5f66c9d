// TMA tensor maps of the grouped GEMMs (moe_tensor_maps.h).
#include "kernels/cuda/moe_tensor_maps.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace afd::kernels::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult query{};
        AFD_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query));
        AFD_CHECK(query == cudaDriverEntryPointSuccess && ptr != nullptr,
                  "cuTensorMapEncodeTiled is not available from the CUDA driver");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }();
    return fn;
}

CUtensorMap encodeTensorMap(const void* base, uint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides,
                            const cuuint32_t* box, CUtensorMapL2promotion promotion, CUresult* result) {
    CUtensorMap map;
    std::memset(&map, 0, sizeof(map));
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    *result = tensorMapEncoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides,
                                 box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return map;
}

}  // namespace

CUtensorMap tokenRowsMap(const void* base, int64_t rows, int64_t cols, uint32_t box_rows) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
    const cuuint32_t box[2] = {64, box_rows};
    CUresult result;
    const CUtensorMap map = encodeTensorMap(base, 2, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, &result);
    AFD_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed ({}) for a [{}, {}] bf16 matrix, box rows {}",
              static_cast<int>(result), rows, cols, box_rows);
    return map;
}

CUtensorMap packedWeightMap(const core::Bf16* base, int64_t experts, int64_t units, int64_t k_blocks,
                            uint32_t box_units) {
    const cuuint64_t block = 64 * 64 * 2;
    const cuuint64_t dims[5] = {64, 64, static_cast<cuuint64_t>(units), static_cast<cuuint64_t>(k_blocks),
                                static_cast<cuuint64_t>(experts)};
    const cuuint64_t strides[4] = {128, block, static_cast<cuuint64_t>(units) * block,
                                   static_cast<cuuint64_t>(units * k_blocks) * block};
    const cuuint32_t box[5] = {64, 64, box_units, 1, 1};
    CUresult result;
    const CUtensorMap map = encodeTensorMap(base, 5, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_NONE, &result);
    AFD_CHECK(result == CUDA_SUCCESS,
              "cuTensorMapEncodeTiled failed ({}) for packed weights of {} experts x {} units x {} k-blocks",
              static_cast<int>(result), experts, units, k_blocks);
    return map;
}

uint32_t tokenBoxRows(const MoeTileShape& s) {
    return static_cast<uint32_t>(s.block_tokens > 256 ? 96 : std::min(64, s.block_tokens));
}

uint32_t fullTokenBoxRows(const MoeTileShape& s) {
    return s.block_tokens <= 256 ? static_cast<uint32_t>(s.block_tokens) : tokenBoxRows(s);
}

}  // namespace afd::kernels::cuda
