// Gate-up and down grouped GEMM kernels of the Wide256Pair tile configuration (kWide256PairShape in
// moe_grouped_gemm.h): the wide256 tile in clusters of two CTAs that share each token tile by TMA multicast.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Wide256Pair)
