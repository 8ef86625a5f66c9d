// Internal launchers of the attention-side device ops (embedding_gather.cu, add_rms_norm.cu, qkv_rope.cu,
// qkv_rope_padded.cu, cast_mask.cu, sampling.cu). Each enqueues its kernel for params the host side (dense_cuda.cpp,
// sampling_cuda.cpp) has already checked and returns the launch status.
#pragma once

#include <cuda_runtime.h>

#include "kernels/dense_cuda.h"
#include "kernels/sampling_cuda.h"

namespace afd::kernels::cuda {

cudaError_t enqueueEmbedding(const EmbeddingParams& params, cudaStream_t stream);
cudaError_t enqueueAddRmsNorm(const AddRmsNormParams& params, cudaStream_t stream);
cudaError_t enqueueQkvRope(const QkvRopeParams& params, cudaStream_t stream);        // rope_dim == head_dim
cudaError_t enqueueQkvRopePadded(const QkvRopeParams& params, cudaStream_t stream);  // rope_dim < head_dim
cudaError_t enqueueCast(const CastParams& params, cudaStream_t stream);
cudaError_t enqueueMaskPaddedRows(const MaskPaddedRowsParams& params, cudaStream_t stream);
cudaError_t enqueueSampleTokens(const SampleTokensParams& params, cudaStream_t stream);

}  // namespace afd::kernels::cuda
