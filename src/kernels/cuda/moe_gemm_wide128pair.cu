// Gate-up and down grouped GEMM kernels of the Wide128Pair tile configuration (kWide128PairShape in
// moe_grouped_gemm.h): the wide128 tile in clusters of two CTAs that share each token tile by TMA multicast.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(Wide128Pair)
