// Gate-up and down grouped GEMM kernels of the Tiny8 tile configuration (kTiny8Shape in moe_grouped_gemm.h).
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Tiny8)
