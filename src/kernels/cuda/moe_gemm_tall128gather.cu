// Gate-up and down grouped GEMM kernels of the Tall128Gather tile configuration (kTall128GatherShape in
// moe_grouped_gemm.h): tall128's 256 weight rows x up to 128 tokens per item, token rows by cp.async from x and h.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Tall128Gather)
