// Combine stage of the MoE layer: out[t] = sum over t's served entries of topk_weight * y[slot], summed in fp32
// in entry order (deterministic), rounded to bf16 once or stored as fp32 (Out = float). One CTA per token, 16 bytes (8
// values) per thread.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBatch = 8;  // routing entries whose rows of y are read together

__device__ __forceinline__ void accumulate(float (&acc)[8], const uint4& packed, float w) {
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        acc[2 * q] += w * __uint_as_float(words[q] << 16);
        acc[2 * q + 1] += w * __uint_as_float(words[q] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
    const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}

// y[slot[q], col .. col + 8) for the kBatch slots (-1: not read), all loads issued before any is used. kFromL2: y is
// being written by a kernel still running (read at L2, ld.global.cg).
template <bool kFromL2>
__device__ __forceinline__ void loadRows(const int (&slot)[kBatch], const uint16_t* y, int hidden, int col,
                                         uint4 (&packed)[kBatch]) {
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
        if (slot[q] >= 0) {
            const auto* src = reinterpret_cast<const uint4*>(y + static_cast<int64_t>(slot[q]) * hidden + col);
            packed[q] = kFromL2 ? __ldcg(src) : *src;
        }
    }
}

// out[0 .. 8) = the fp32 sums, rounded to bf16 once (Out = uint16_t) or as they are (Out = float).
__device__ __forceinline__ void storeSum(const float (&acc)[8], float* out) {
    reinterpret_cast<float4*>(out)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
}
__device__ __forceinline__ void storeSum(const float (&acc)[8], uint16_t* out) {
    uint4 result;
    result.x = packBf16(acc[0], acc[1]);
    result.y = packBf16(acc[2], acc[3]);
    result.z = packBf16(acc[4], acc[5]);
    result.w = packBf16(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(out) = result;
}

// out[t, col .. col + 8) = sum over t's served entries of topk_weight * y[slot, col .. col + 8), in fp32 in entry
// order, rounded to bf16 once. kBatch entries' rows are loaded before any is summed (the sum stays in entry order),
// so each thread has that many 16-byte reads of y in flight rather than one. kFromL2: as loadRows.
template <bool kFromL2, typename Out>
__device__ __forceinline__ void combineColumns(const int32_t* slots, const float* weights, int top_k, const uint16_t* y,
                                               Out* out_row, int hidden, int col) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j0 = 0; j0 < top_k; j0 += kBatch) {
        int slot[kBatch];
        uint4 packed[kBatch];
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            slot[q] = j0 + q < top_k ? __ldg(slots + j0 + q) : -1;
        }
        loadRows<kFromL2>(slot, y, hidden, col, packed);
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            if (slot[q] >= 0) {
                accumulate(acc, packed[q], __ldg(weights + j0 + q));
            }
        }
    }
    storeSum(acc, out_row + col);
}

template <typename Out>
__global__ void __launch_bounds__(kThreads) combineKernel(const int32_t* entry_slot, const float* topk_weights,
                                                          const uint16_t* y, Out* out, int top_k, int hidden) {
    const int t = blockIdx.x;
    sm90::gridDependencyWait();
    sm90::launchDependents();
    const int32_t* slots = entry_slot + static_cast<int64_t>(t) * top_k;
    const float* weights = topk_weights + static_cast<int64_t>(t) * top_k;
    for (int h = threadIdx.x * 8; h < hidden; h += kThreads * 8) {
        combineColumns<false, Out>(slots, weights, top_k, y, out + static_cast<int64_t>(t) * hidden, hidden, h);
    }
}

// The combine by part (MoeCombineParams::parts > 0): part_cols / 8 threads per token, one pass of kThreads threads per
// CTA: CTA c sums columns [part * part_cols, (part + 1) * part_cols) of its kThreads / (part_cols / 8) tokens, part =
// c / chunks, once the down kernel has counted every item of that part (part_done[part] >= *total_items; thread 0
// acquires, the CTA barrier orders the other threads' reads of y after it). No thread waits for the down grid before
// its sums: the CTAs take the SMs the down CTAs leave and sum the blocks finished first while the last items run. The
// tokens' slots and weights do not depend on the down kernel: they are read before the wait, so that the last part,
// summed after the down kernel's last item, costs one round trip of y's rows (up to kBatch entries; more are read
// after it).
template <typename Out>
__global__ void __launch_bounds__(kThreads)
    combineByPartKernel(const int32_t* entry_slot, const float* topk_weights, const uint16_t* y, Out* out,
                        int num_tokens, int top_k, int hidden, int part_cols, int chunks, const int32_t* part_done,
                        const int32_t* total_items) {
    const int part = static_cast<int>(blockIdx.x) / chunks;
    const int chunk = static_cast<int>(blockIdx.x) - part * chunks;
    const int threads_per_token = part_cols / 8;
    const int t = chunk * (kThreads / threads_per_token) + static_cast<int>(threadIdx.x) / threads_per_token;
    const int col = part * part_cols + (static_cast<int>(threadIdx.x) % threads_per_token) * 8;
    const bool active = t < num_tokens;
    const bool preloaded = top_k <= kBatch;
    const int64_t entry = static_cast<int64_t>(t) * top_k;
    int slot[kBatch];
    float weight[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
        slot[q] = active && preloaded && q < top_k ? __ldg(entry_slot + entry + q) : -1;
        weight[q] = slot[q] >= 0 ? __ldg(topk_weights + entry + q) : 0.0f;
    }
    if (threadIdx.x == 0) {
        // NOTE: the item count comes from the permute stage, whose grid completed before any gate-up CTA left its
        // SM, so before any down CTA (and this kernel, launched once every down CTA ran) started.
        sm90::waitAtLeastAcquire(part_done + part, sm90::ldAcquireGpu(total_items));
    }
    __syncthreads();
    if (active && preloaded) {
        // As combineColumns: entry order, fp32, rounded once.
        uint4 packed[kBatch];
        loadRows<true>(slot, y, hidden, col, packed);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
            if (slot[q] >= 0) {
                accumulate(acc, packed[q], weight[q]);
            }
        }
        storeSum(acc, out + static_cast<int64_t>(t) * hidden + col);
    } else if (active) {
        combineColumns<true, Out>(entry_slot + entry, topk_weights + entry, top_k, y,
                                  out + static_cast<int64_t>(t) * hidden, hidden, col);
    }
    if (threadIdx.x == 0) {
        sm90::gridDependencyWait();  // this grid completes after the down grid, as in a plain stream
    }
    sm90::launchDependents();  // after the sums: the next kernel may zero part_done
}

template <typename Out>
cudaError_t launchCombine(const MoeCombineParams& p, Out* out, cudaStream_t stream) {
    if (p.num_tokens < 1 || p.hidden % 8 != 0 || p.parts < 0) {
        return cudaErrorInvalidValue;
    }
    cudaLaunchAttribute attr[1];
    if (p.parts == 0) {
        const cudaLaunchConfig_t config =
            pdlLaunchConfig(static_cast<unsigned>(p.num_tokens), kThreads, stream, true, attr);
        return cudaLaunchKernelEx(&config, combineKernel<Out>, p.entry_slot, p.topk_weights, p.y, out, p.top_k,
                                  p.hidden);
    }
    if (p.hidden % p.parts != 0 || p.part_done == nullptr || p.total_items == nullptr) {
        return cudaErrorInvalidValue;
    }
    const int part_cols = p.hidden / p.parts;
    if (part_cols % 8 != 0 || kThreads % (part_cols / 8) != 0) {
        return cudaErrorInvalidValue;
    }
    const int tokens_per_cta = kThreads / (part_cols / 8);
    const int chunks = (p.num_tokens + tokens_per_cta - 1) / tokens_per_cta;
    const cudaLaunchConfig_t config =
        pdlLaunchConfig(static_cast<unsigned>(p.parts * chunks), kThreads, stream, true, attr);
    return cudaLaunchKernelEx(&config, combineByPartKernel<Out>, p.entry_slot, p.topk_weights, p.y, out, p.num_tokens,
                              p.top_k, p.hidden, part_cols, chunks, p.part_done, p.total_items);
}

}  // namespace

cudaError_t launchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
    return p.out_f32 ? launchCombine(p, static_cast<float*>(p.out), stream)
                     : launchCombine(p, static_cast<uint16_t*>(p.out), stream);
}

}  // namespace afd::kernels::cuda
