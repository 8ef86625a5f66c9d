// The gate-up and down grouped GEMM kernels of tile configuration small64 (kMoeTiles in kernels/moe_cuda_plan.h), one
// file per configuration so that they compile in parallel.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_INSTANTIATE_GROUPED_GEMM(afd::kernels::MoeTileConfig::kSmall64);
