// Gate-up and down grouped GEMM kernels of the Wide256Gather tile configuration (kWide256GatherShape in
// moe_grouped_gemm.h): the wide tile with cp.async token gathers instead of token TMA boxes.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Wide256Gather)
