// Host side of the attention-side device ops (dense_cuda.h): checks the params, then enqueues the kernels.
#include "kernels/dense_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dense_stages.h"

namespace afd::kernels {
namespace {

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

constexpr int64_t kMaxGridRows = 0x7fffffff;

}  // namespace

void embeddingCuda(const EmbeddingParams& p, void* stream) {
    AFD_CHECK(p.num_tokens >= 0, "embeddingCuda: num_tokens {} < 0", p.num_tokens);
    AFD_CHECK(p.vocab_size > 0 && p.vocab_size <= kMaxGridRows, "embeddingCuda: vocab_size {} outside [1, 2^31)",
              p.vocab_size);
    AFD_CHECK(p.hidden > 0 && p.hidden % 8 == 0, "embeddingCuda: hidden {} must be a positive multiple of 8", p.hidden);
    if (p.num_tokens == 0) {
        return;
    }
    AFD_CHECK(p.ids != nullptr && p.table != nullptr && p.out != nullptr,
              "embeddingCuda: ids, table and out must not be null");
    AFD_CHECK(aligned16(p.table) && aligned16(p.out), "embeddingCuda: table and out must be 16-byte aligned");
    AFD_CUDA_CHECK(cuda::enqueueEmbedding(p, static_cast<cudaStream_t>(stream)));
}

void addRmsNormCuda(const AddRmsNormParams& p, void* stream) {
    AFD_CHECK(p.num_tokens >= 0, "addRmsNormCuda: num_tokens {} < 0", p.num_tokens);
    AFD_CHECK(p.hidden > 0 && p.hidden % 8 == 0 && p.hidden <= kMaxAddRmsNormHidden,
              "addRmsNormCuda: hidden {} must be a positive multiple of 8 up to {}", p.hidden, kMaxAddRmsNormHidden);
    AFD_CHECK(p.eps >= 0.0f, "addRmsNormCuda: eps {} < 0", p.eps);
    AFD_CHECK(p.rows == nullptr || p.delta == nullptr,
              "addRmsNormCuda: rows (the final norm of selected rows) takes no delta");
    AFD_CHECK(p.bias == nullptr || p.delta != nullptr, "addRmsNormCuda: a bias needs a delta to add it to");
    AFD_CHECK(p.delta_dtype == ActDType::kBf16 || p.delta_dtype == ActDType::kF32,
              "addRmsNormCuda: delta_dtype must be kBf16 or kF32");
    const int64_t out_rows = p.rows != nullptr ? p.num_rows : p.num_tokens;
    AFD_CHECK(p.num_rows >= 0 && out_rows <= kMaxGridRows, "addRmsNormCuda: {} output rows outside [0, 2^31)",
              out_rows);
    if (out_rows == 0) {
        return;
    }
    AFD_CHECK(p.residual != nullptr && p.weight != nullptr && p.out != nullptr,
              "addRmsNormCuda: residual, weight and out must not be null");
    AFD_CHECK(
        aligned16(p.residual) && aligned16(p.weight) && aligned16(p.out) && aligned16(p.delta) && aligned16(p.bias),
        "addRmsNormCuda: residual, delta, bias, weight and out must be 16-byte aligned");
    AFD_CUDA_CHECK(cuda::enqueueAddRmsNorm(p, static_cast<cudaStream_t>(stream)));
}

void qkvRopeCuda(const QkvRopeParams& p, void* stream) {
    const int64_t hd = p.head_dim;
    AFD_CHECK(hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256,
              "qkvRopeCuda: head_dim {} is not one of 16, 32, 64, 128, 256", hd);
    AFD_CHECK(p.num_tokens >= 0 && p.num_tokens <= kMaxGridRows, "qkvRopeCuda: num_tokens {} outside [0, 2^31)",
              p.num_tokens);
    AFD_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
              "qkvRopeCuda: num_heads {} must be a positive multiple of num_kv_heads {}", p.num_heads, p.num_kv_heads);
    AFD_CHECK((p.num_heads + 2 * p.num_kv_heads) * hd <= (int64_t{1} << 20),
              "qkvRopeCuda: {} q/k/v values per token exceed 2^20", (p.num_heads + 2 * p.num_kv_heads) * hd);
    AFD_CHECK(p.block_size >= 1 && p.block_size <= 1024, "qkvRopeCuda: block_size {} outside [1, 1024]", p.block_size);
    AFD_CHECK(p.num_blocks >= 0 && p.max_position > 0, "qkvRopeCuda: num_blocks {} < 0 or max_position {} < 1",
              p.num_blocks, p.max_position);
    AFD_CHECK(p.eps >= 0.0f, "qkvRopeCuda: eps {} < 0", p.eps);
    const int64_t rd = p.rope_dim == 0 ? hd : p.rope_dim;
    AFD_CHECK(rd >= 2 && rd <= hd && rd % 2 == 0, "qkvRopeCuda: rope_dim {} must be even and in [2, head_dim {}]",
              p.rope_dim, hd);
    if (p.num_tokens == 0) {
        return;
    }
    AFD_CHECK(p.qkv != nullptr && p.positions != nullptr && p.rope_cos != nullptr && p.rope_sin != nullptr &&
                  p.slot_mapping != nullptr && p.q_out != nullptr && p.k_cache != nullptr && p.v_cache != nullptr,
              "qkvRopeCuda: qkv, positions, rope_cos, rope_sin, slot_mapping, q_out, k_cache and v_cache must not "
              "be null");
    AFD_CHECK(aligned16(p.qkv) && aligned16(p.qkv_bias) && aligned16(p.q_norm) && aligned16(p.k_norm) &&
                  aligned16(p.rope_cos) && aligned16(p.rope_sin) && aligned16(p.q_out) && aligned16(p.k_cache) &&
                  aligned16(p.v_cache),
              "qkvRopeCuda: qkv, qkv_bias, q_norm, k_norm, rope tables, q_out and the caches must be 16-byte "
              "aligned");
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    AFD_CUDA_CHECK(rd == hd ? cuda::enqueueQkvRope(p, s) : cuda::enqueueQkvRopePadded(p, s));
}

void castCuda(const CastParams& p, void* stream) {
    AFD_CHECK(p.count >= 0, "castCuda: count {} < 0", p.count);
    AFD_CHECK(
        (p.from == ActDType::kBf16 || p.from == ActDType::kF32) && (p.to == ActDType::kBf16 || p.to == ActDType::kF32),
        "castCuda: from and to must be kBf16 or kF32");
    if (p.count == 0) {
        return;
    }
    AFD_CHECK(p.in != nullptr && p.out != nullptr, "castCuda: in and out must not be null");
    AFD_CHECK(aligned16(p.in) && aligned16(p.out), "castCuda: in and out must be 16-byte aligned");
    const auto span = [&](const void* ptr, ActDType dtype) {
        const auto begin = reinterpret_cast<uintptr_t>(ptr);
        return std::pair<uintptr_t, uintptr_t>(
            begin, begin + static_cast<uintptr_t>(p.count) * (dtype == ActDType::kF32 ? 4u : 2u));
    };
    const auto [in_begin, in_end] = span(p.in, p.from);
    const auto [out_begin, out_end] = span(p.out, p.to);
    AFD_CHECK(in_end <= out_begin || out_end <= in_begin, "castCuda: in and out overlap");
    AFD_CUDA_CHECK(cuda::enqueueCast(p, static_cast<cudaStream_t>(stream)));
}

void maskPaddedRowsCuda(const MaskPaddedRowsParams& p, void* stream) {
    AFD_CHECK(p.num_rows >= 0 && p.top_k > 0, "maskPaddedRowsCuda: num_rows {} < 0 or top_k {} < 1", p.num_rows,
              p.top_k);
    if (p.num_rows == 0) {
        return;
    }
    AFD_CHECK(p.num_valid != nullptr && p.topk_ids != nullptr,
              "maskPaddedRowsCuda: num_valid and topk_ids must not be null");
    AFD_CUDA_CHECK(cuda::enqueueMaskPaddedRows(p, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
