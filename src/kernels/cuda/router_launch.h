// Internal launcher of the router (router.cu) and the size of its workspace; routerForwardCuda (router_cuda.cpp)
// checks the params and the launch status. Host-only header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/router.h"

namespace afd::kernels::cuda {

// logits = x . gate_w^T (bf16 tensor cores, fp32 accumulation, the reduction split over CTAs into partial sums in
// `workspace`), softmax, top-k, optional renormalisation, for RouterParams with act_dtype kBf16 (x [T, H] bf16),
// hidden % 16 == 0, 1 <= num_experts <= 256, top_k <= min(32, num_experts); `workspace` of
// routerWorkspaceBytes(T, H, E) bytes. Two kernels on `stream`, the second launched programmatically; returns the
// launch status.
cudaError_t launchRouter(const RouterParams& params, float* workspace, cudaStream_t stream);
size_t routerWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);
// What one launch for exactly num_tokens uses of that workspace (the check per call; no loop over smaller T).
size_t routerPartialBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts);

}  // namespace afd::kernels::cuda
