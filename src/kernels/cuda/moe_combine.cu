// Combine stage of the MoE layer: out[t] = sum over t's served entries of topk_weight * y[slot], summed in fp32
// in entry order (deterministic), rounded to bf16 once (moe_combine_row.cuh). One CTA per token, 16 bytes (8 values)
// per thread.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_combine_row.cuh"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBatch = 8;  // routing entries whose rows of y are read together

// Columns [col_begin, hidden) of token blockIdx.x's row of out (the down kernel may have summed the others).
__global__ void __launch_bounds__(kThreads)
    combineKernel(const int32_t* entry_slot, const float* topk_weights, const uint16_t* y, uint16_t* out, int top_k,
                  int hidden, int col_begin) {
    const int t = blockIdx.x;
    sm90::gridDependencyWait();
    sm90::launchDependents();
    const int32_t* slots = entry_slot + static_cast<int64_t>(t) * top_k;
    const float* weights = topk_weights + static_cast<int64_t>(t) * top_k;
    for (int h = col_begin + threadIdx.x * 8; h < hidden; h += kThreads * 8) {
        *reinterpret_cast<uint4*>(out + static_cast<int64_t>(t) * hidden + h) =
            combineChunk<kBatch>(slots, weights, top_k, y, hidden, h);
    }
}

}  // namespace

cudaError_t launchMoeCombine(const int32_t* entry_slot, const float* topk_weights, const uint16_t* y, uint16_t* out,
                             int num_tokens, int top_k, int hidden, int col_begin, cudaStream_t stream,
                             bool programmatic) {
    if (num_tokens < 1 || hidden % 8 != 0 || col_begin % 8 != 0 || col_begin < 0 || col_begin >= hidden) {
        return cudaErrorInvalidValue;
    }
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t config =
        pdlLaunchConfig(static_cast<unsigned>(num_tokens), kThreads, stream, programmatic, attr);
    return cudaLaunchKernelEx(&config, combineKernel, entry_slot, topk_weights, y, out, top_k, hidden, col_begin);
}

}  // namespace afd::kernels::cuda
