// MoE router: logits = x . gate_w^T with bf16 tensor-core MMA (m16n8k16, fp32 accumulation), then per token an
// fp32 softmax, top-k by probability (ties: lower expert id) and optional renormalisation of the k weights.
// One CTA of 4 warps per 16 tokens: warp w computes experts [w * E/4, (w + 1) * E/4) of the 16 tokens into
// shared memory, then takes 4 of the tokens through softmax and top-k (one lane per 32 experts' stripe).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_stages.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kTokens = 16;
constexpr int kWarps = 4;
constexpr int kMaxExperts = 256;
constexpr int kMaxBlocksPerWarp = kMaxExperts / (8 * kWarps);  // n-blocks of 8 experts per warp
constexpr int kMaxStripes = kMaxExperts / 32;                    // experts per lane in the top-k
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ uint32_t load2(const uint16_t* p) { return __ldg(reinterpret_cast<const uint32_t*>(p)); }

__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Warp argmax of (value, index): larger value wins, equal values go to the lower index.
__device__ __forceinline__ void warpArgMax(float& value, int& index) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float v = __shfl_xor_sync(kFullMask, value, offset);
        const int i = __shfl_xor_sync(kFullMask, index, offset);
        if (v > value || (v == value && i < index)) {
            value = v;
            index = i;
        }
    }
}

__global__ void __launch_bounds__(kWarps * 32) routerKernel(const uint16_t* x, const uint16_t* gate_w, float* logits,
                                                            int32_t* topk_ids, float* topk_weights, int num_tokens,
                                                            int hidden, int num_experts, int top_k, bool renormalize) {
    extern __shared__ float s_logits[];  // [kTokens][num_experts]
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;
    const int t0 = blockIdx.x * kTokens;
    const int blocks = num_experts / (8 * kWarps);
    const int expert_base = warp * (num_experts / kWarps);

    // ---- logits: rows t0 + g and t0 + g + 8, experts expert_base + 8j + (0..7)
    const bool valid_a = t0 + g < num_tokens;
    const bool valid_b = t0 + g + 8 < num_tokens;
    const uint16_t* xa = x + static_cast<int64_t>(valid_a ? t0 + g : 0) * hidden + 2 * t4;
    const uint16_t* xb = x + static_cast<int64_t>(valid_b ? t0 + g + 8 : 0) * hidden + 2 * t4;
    float acc[kMaxBlocksPerWarp][4];
#pragma unroll
    for (int j = 0; j < kMaxBlocksPerWarp; ++j) {
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }
    for (int k0 = 0; k0 < hidden; k0 += 16) {
        const uint32_t a0 = valid_a ? load2(xa + k0) : 0u;
        const uint32_t a1 = valid_b ? load2(xb + k0) : 0u;
        const uint32_t a2 = valid_a ? load2(xa + k0 + 8) : 0u;
        const uint32_t a3 = valid_b ? load2(xb + k0 + 8) : 0u;
#pragma unroll
        for (int j = 0; j < kMaxBlocksPerWarp; ++j) {
            if (j < blocks) {
                const uint16_t* w = gate_w + static_cast<int64_t>(expert_base + 8 * j + g) * hidden + k0 + 2 * t4;
                mma16816(acc[j], a0, a1, a2, a3, load2(w), load2(w + 8));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kMaxBlocksPerWarp; ++j) {
        if (j < blocks) {
            const int e = expert_base + 8 * j + 2 * t4;
            s_logits[g * num_experts + e] = acc[j][0];
            s_logits[g * num_experts + e + 1] = acc[j][1];
            s_logits[(g + 8) * num_experts + e] = acc[j][2];
            s_logits[(g + 8) * num_experts + e + 1] = acc[j][3];
        }
    }
    __syncthreads();

    // ---- softmax and top-k: warp w takes tokens 4w .. 4w + 3 of the tile; lane holds experts lane + 32q.
    const int stripes = num_experts / 32;
    for (int r = warp * (kTokens / kWarps); r < (warp + 1) * (kTokens / kWarps); ++r) {
        const int t = t0 + r;
        if (t >= num_tokens) {
            break;
        }
        float p[kMaxStripes];
        float max_logit = -INFINITY;
#pragma unroll
        for (int q = 0; q < kMaxStripes; ++q) {
            p[q] = -INFINITY;
            if (q < stripes) {
                p[q] = s_logits[r * num_experts + lane + 32 * q];
                if (logits != nullptr) {
                    logits[static_cast<int64_t>(t) * num_experts + lane + 32 * q] = p[q];
                }
                max_logit = fmaxf(max_logit, p[q]);
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            max_logit = fmaxf(max_logit, __shfl_xor_sync(kFullMask, max_logit, offset));
        }
        float sum = 0.0f;
#pragma unroll
        for (int q = 0; q < kMaxStripes; ++q) {
            if (q < stripes) {
                p[q] = expf(p[q] - max_logit);
                sum += p[q];
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            sum += __shfl_xor_sync(kFullMask, sum, offset);
        }
#pragma unroll
        for (int q = 0; q < kMaxStripes; ++q) {
            p[q] = q < stripes ? p[q] / sum : -1.0f;  // -1 marks "not a candidate" (probabilities are >= 0)
        }
        float my_weight = 0.0f;
        int my_id = 0;
        float selected_sum = 0.0f;
        for (int k = 0; k < top_k; ++k) {
            float best = -1.0f;
            int best_id = 0x7fffffff;
#pragma unroll
            for (int q = 0; q < kMaxStripes; ++q) {
                if (p[q] > best) {  // stripes are visited in increasing id: a strict > keeps the lower id on ties
                    best = p[q];
                    best_id = lane + 32 * q;
                }
            }
            warpArgMax(best, best_id);
#pragma unroll
            for (int q = 0; q < kMaxStripes; ++q) {
                if (lane + 32 * q == best_id) {
                    p[q] = -1.0f;
                }
            }
            if (lane == k) {
                my_weight = best;
                my_id = best_id;
            }
            selected_sum += best;
        }
        if (lane < top_k) {
            topk_ids[static_cast<int64_t>(t) * top_k + lane] = my_id;
            topk_weights[static_cast<int64_t>(t) * top_k + lane] = renormalize ? my_weight / selected_sum : my_weight;
        }
    }
}

}  // namespace

cudaError_t launchRouter(const uint16_t* x, const uint16_t* gate_w, float* logits, int32_t* topk_ids,
                         float* topk_weights, int num_tokens, int hidden, int num_experts, int top_k, bool renormalize,
                         cudaStream_t stream) {
    if (num_tokens < 1 || hidden % 16 != 0 || num_experts % 32 != 0 || num_experts > kMaxExperts || top_k < 1 ||
        top_k > 32 || top_k > num_experts) {
        return cudaErrorInvalidValue;
    }
    const unsigned blocks = static_cast<unsigned>((num_tokens + kTokens - 1) / kTokens);
    const size_t smem = static_cast<size_t>(kTokens) * num_experts * sizeof(float);
    routerKernel<<<blocks, kWarps * 32, smem, stream>>>(x, gate_w, logits, topk_ids, topk_weights, num_tokens, hidden,
                                                         num_experts, top_k, renormalize);
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
