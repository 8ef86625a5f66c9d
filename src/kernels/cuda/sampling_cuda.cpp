// Host side of sampleTokensCuda (sampling_cuda.h): checks the params and launches sampling.cu's kernel.
#include "kernels/sampling_cuda.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dense_stages.h"

namespace afd::kernels {

void sampleTokensCuda(const SampleTokensParams& p, void* stream) {
    AFD_CHECK(p.num_rows >= 0, "sampleTokensCuda: num_rows {} < 0", p.num_rows);
    AFD_CHECK(p.vocab_size > 0 && p.vocab_size <= kMaxSampleVocab, "sampleTokensCuda: vocab_size {} outside [1, {}]",
              p.vocab_size, kMaxSampleVocab);
    if (p.num_rows == 0) {
        return;
    }
    AFD_CHECK(p.logits != nullptr && p.out_ids != nullptr, "sampleTokensCuda: logits and out_ids must not be null");
    AFD_CHECK(p.num_rows <= int64_t{0x7fffffff}, "sampleTokensCuda: {} rows exceed the grid", p.num_rows);
    AFD_CHECK(reinterpret_cast<uintptr_t>(p.logits) % 4 == 0, "sampleTokensCuda: logits must be 4-byte aligned");
    AFD_CUDA_CHECK(cuda::enqueueSampleTokens(p, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
