#include "kernels/device_random.h"

#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_random_stages.h"

namespace afd::kernels {

void syntheticFillCuda(const SyntheticFillParams& p, void* stream) {
    AFD_CHECK(p.count >= 0, "synthetic fill: count {} < 0", p.count);
    if (p.count == 0) return;
    AFD_CHECK(p.out != nullptr && reinterpret_cast<uintptr_t>(p.out) % 2 == 0,
              "synthetic fill: out must be a 2-byte aligned device pointer");
    AFD_CUDA_CHECK(cuda::launchSyntheticFill(reinterpret_cast<uint16_t*>(p.out), p.count, p.key, p.centre, p.half_width,
                                             static_cast<cudaStream_t>(stream)));
}

void syntheticPackedMlpCuda(const SyntheticPackedMlpParams& p, void* stream) {
    AFD_CHECK(p.num_experts >= 0 && p.hidden > 0 && p.inter > 0, "synthetic packed MLP: bad sizes E {} H {} I {}",
              p.num_experts, p.hidden, p.inter);
    AFD_CHECK(p.hidden % 64 == 0, "synthetic packed MLP: the packed layout needs hidden % 64 == 0, got H {}", p.hidden);
    if (p.num_experts == 0) return;
    AFD_CHECK(p.keys != nullptr && p.w13_packed != nullptr && p.w2_packed != nullptr,
              "synthetic packed MLP: null keys or outputs");
    AFD_CHECK(reinterpret_cast<uintptr_t>(p.w13_packed) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w2_packed) % 16 == 0,
              "synthetic packed MLP: w13_packed and w2_packed must be 16-byte aligned");
    AFD_CUDA_CHECK(cuda::launchSyntheticPackedMlp(p.keys, p.num_experts, p.hidden, p.inter, p.gate_up_half_width,
                                                  p.down_half_width, reinterpret_cast<uint16_t*>(p.w13_packed),
                                                  reinterpret_cast<uint16_t*>(p.w2_packed),
                                                  static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
