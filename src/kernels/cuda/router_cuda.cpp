// Host side of the CUDA router (routerForwardCuda in kernels/moe_cuda.h): checks the params and the workspace, then
// launches router.cu's two kernels on the caller's stream.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/router_launch.h"
#include "kernels/moe_cuda.h"

namespace afd::kernels {

size_t routerCudaWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts) {
    return cuda::routerWorkspaceBytes(num_tokens, hidden, num_experts);
}

void routerForwardCuda(const RouterParams& params, void* workspace, size_t workspace_bytes, void* stream) {
    AFD_CHECK(params.act_dtype == ActDType::kBf16, "routerForwardCuda: act_dtype must be kBf16");
    AFD_CHECK(params.num_tokens >= 0, "routerForwardCuda: num_tokens {} < 0", params.num_tokens);
    if (params.num_tokens == 0) {
        return;
    }
    AFD_CHECK(params.x && params.gate_w && params.topk_ids && params.topk_weights,
              "routerForwardCuda: null device pointer in params");
    AFD_CHECK(params.hidden > 0 && params.hidden % 16 == 0, "routerForwardCuda: hidden {} must be a multiple of 16",
              params.hidden);
    AFD_CHECK(params.num_experts > 0 && params.num_experts <= 256, "routerForwardCuda: num_experts {} outside [1, 256]",
              params.num_experts);
    AFD_CHECK(params.top_k >= 1 && params.top_k <= 32 && params.top_k <= params.num_experts,
              "routerForwardCuda: top_k {} outside [1, min(32, num_experts)]", params.top_k);
    const size_t needed = cuda::routerPartialBytes(params.num_tokens, params.hidden, params.num_experts);
    AFD_CHECK(workspace != nullptr && workspace_bytes >= needed,
              "routerForwardCuda: workspace of {} bytes is too small: T {} needs {} (routerCudaWorkspaceBytes)",
              workspace_bytes, params.num_tokens, needed);
    AFD_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "routerForwardCuda: workspace must be 16-byte aligned");
    AFD_CUDA_CHECK(cuda::launchRouter(params, static_cast<float*>(workspace), static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
