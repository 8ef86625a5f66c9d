// Gate-up and down grouped GEMM kernels of the Tall128 tile configuration (kTall128Shape in moe_grouped_gemm.h):
// 256 weight rows (two consumers x two 64-row blocks) x up to 128 tokens per item.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Tall128)
