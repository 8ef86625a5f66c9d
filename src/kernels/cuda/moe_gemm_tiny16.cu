// Gate-up and down grouped GEMM kernels of the Tiny16 tile configuration (kTiny16Shape in moe_grouped_gemm.h).
#include "kernels/cuda/moe_grouped_gemm.cuh"

AFD_DEFINE_GROUPED_GEMM(Tiny16)
