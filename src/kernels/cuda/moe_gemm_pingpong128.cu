// Gate-up and down grouped GEMM kernels of the PingPong128 tile configuration (kPingPong128Shape in
// moe_grouped_gemm.h), one file per configuration so that they compile in parallel.
#include "kernels/cuda/moe_gemm_launch.cuh"

AFD_DEFINE_GROUPED_GEMM(PingPong128)
