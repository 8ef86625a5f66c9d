// MoE router in two kernels on one stream:
//   logits   partial[s, t, e] = x[t, k-range s] . gate_w[e, k-range s]^T: bf16 tensor-core MMA (m16n8k16, fp32
//            accumulation) over a CTA tile of 128 tokens x 128 experts, the reduction split into S ranges of whole
//            64-element chunks (routerSplit), each streamed through a 3-stage cp.async pipeline in shared memory;
//   top-k    logits = the sum of each token's S partials (a CTA per token up to 256 tokens, a warp per token beyond),
//            fp32 softmax, top-k by probability (ties: lower expert id), optional renormalisation of the k weights.
// The split spreads the gate weights (E x H x 2 bytes, 512 KB for Qwen3-30B-A3B) over S CTAs when there are few
// token tiles: at T = 1 32 CTAs each read one 16 KB chunk, where one CTA reading all of it waited on 128 dependent
// round trips (about 200 us).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/router_launch.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda {
namespace {

constexpr int kTileTokens = 128;
constexpr int kTileExperts = 128;
constexpr int kChunk = 64;             // reduction elements per pipeline stage
constexpr int kRowElems = kChunk + 8;  // shared-memory row pitch (144 bytes: ldmatrix rows hit distinct banks)
constexpr int kStages = 3;
constexpr int kLogitsThreads = 256;  // 8 warps: 4 token quarters of 32 x 2 expert halves of 64
constexpr int kTopkThreads = 256;    // top-k CTA: 8 tokens (a warp each) or one token
constexpr int kWarpTopkSplits = 4;   // partial sums the warp-per-token top-k loads at once
constexpr int kMaxExperts = 256;
constexpr int kMaxStripes = kMaxExperts / 32;  // experts per lane in the top-k
// Splits: as many as keep the logits kernel within a target grid. Up to kCtaTopkTokens tokens the target is about two
// CTAs per SM of an H200, at most kMaxSplits, and each token's top-k takes a CTA (its threads share the many partial
// sums); beyond, about one CTA per SM, at most kMaxSplits / 2, and a warp per token (more splits made the warps' sums
// the longer part: T = 1024 took 24 us with 32 splits, 18 with 16).
constexpr int kMaxSplits = 32;
constexpr int kCtaTopkTokens = 256;
constexpr int64_t kSmallTargetCtas = 264;
constexpr int64_t kLargeTargetCtas = 132;
constexpr int kStageElems = (kTileTokens + kTileExperts) * kRowElems;
constexpr size_t kLogitsSmem = static_cast<size_t>(kStages) * kStageElems * 2;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void cpAsyncWait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Chunk c of the CTA's tile into stage `stage`: rows [0, 128) tokens t0 + r of x, rows [128, 256) experts
// e0 + r - 128 of gate_w, 8 pieces of 16 bytes per row; rows past T or E and columns past H are zero-filled.
__device__ __forceinline__ void loadChunk(uint16_t* stage, const uint16_t* x, const uint16_t* gate_w, int t0, int e0,
                                          int c, int num_tokens, int hidden, int num_experts) {
    for (int i = threadIdx.x; i < (kTileTokens + kTileExperts) * 8; i += kLogitsThreads) {
        const int row = i >> 3;
        const int k = c * kChunk + (i & 7) * 8;
        const uint16_t* src = x;
        bool valid = false;
        if (row < kTileTokens) {
            valid = t0 + row < num_tokens && k < hidden;
            src = valid ? x + static_cast<int64_t>(t0 + row) * hidden + k : x;
        } else {
            const int e = e0 + row - kTileTokens;
            valid = e < num_experts && k < hidden;
            src = valid ? gate_w + static_cast<int64_t>(e) * hidden + k : gate_w;
        }
        sm90::cpAsync16(sm90::smemAddr(stage + row * kRowElems + (i & 7) * 8), src, valid);
    }
}

// The CTA's partial logits of its tile (tokens t0 + [0, 128), experts e0 + [0, 128)) over chunks [c_begin, c_begin +
// n) of the hidden size, into acc: thread (warp w, lane l) holds tokens 32 (w % 4) + 16 m + l / 4 (+ 8) and experts
// 64 (w / 4) + 8 j + 2 (l % 4) (+ 1) in acc[m][j][0, 1] (and [2, 3] for the token 8 rows on). Ends with every copy
// landed and read, so the caller may reuse the shared memory after a __syncthreads.
__device__ __forceinline__ void logitsMainloop(uint16_t* smem, const uint16_t* x, const uint16_t* gate_w, int t0,
                                               int e0, int c_begin, int n, int num_tokens, int hidden, int num_experts,
                                               float (&acc)[2][8][4]) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int wm = warp & 3;   // tokens [32 wm, 32 wm + 32) of the tile: two 16-row MMA tiles
    const int wn = warp >> 2;  // experts [64 wn, 64 wn + 64) of the tile
    for (int c = 0; c < kStages - 1; ++c) {
        if (c < n) {
            loadChunk(smem + c * kStageElems, x, gate_w, t0, e0, c_begin + c, num_tokens, hidden, num_experts);
        }
        cpAsyncCommit();  // empty groups keep the count of groups in flight uniform
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
        }
    }
    for (int c = 0; c < n; ++c) {
        cpAsyncWait<kStages - 2>();  // chunk c has landed (this thread's copies) ...
        __syncthreads();             // ... everyone's; and chunk c - 1's stage has been read by every warp
        if (c + kStages - 1 < n) {
            loadChunk(smem + ((c + kStages - 1) % kStages) * kStageElems, x, gate_w, t0, e0, c_begin + c + kStages - 1,
                      num_tokens, hidden, num_experts);
        }
        cpAsyncCommit();
        const uint16_t* stage = smem + (c % kStages) * kStageElems;
        // A (16 tokens x 16): lanes 0-15 rows at k, lanes 16-31 the same rows at k + 8. B (16 x 8 experts, stored
        // [expert][k]): lanes 8m .. 8m + 7 address matrix m: experts +8 for m >= 2, k + 8 for odd m.
        const uint32_t a_addr = sm90::smemAddr(stage + (32 * wm + (lane & 15)) * kRowElems + (lane >> 4) * 8);
        const uint32_t b_addr = sm90::smemAddr(
            stage + (kTileTokens + 64 * wn + (lane & 7) + ((lane >> 4) << 3)) * kRowElems + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int kk = 0; kk < kChunk / 16; ++kk) {
            uint32_t a[2][4];
            ldmatrixX4(a[0], a_addr + kk * 32);
            ldmatrixX4(a[1], a_addr + 16 * kRowElems * 2 + kk * 32);
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                uint32_t b[4];
                ldmatrixX4(b, b_addr + p * 16 * kRowElems * 2 + kk * 32);
#pragma unroll
                for (int m = 0; m < 2; ++m) {
                    mma16816(acc[m][2 * p], a[m], b[0], b[1]);
                    mma16816(acc[m][2 * p + 1], a[m], b[2], b[3]);
                }
            }
        }
    }
    cpAsyncWait<0>();
}

// Calls store(token, expert, v0, v1, both) for the pairs of acc (logitsMainloop's layout) inside the tile's tokens and
// experts: (token, expert) and, when `both`, (token, expert + 1), tile-relative (expert + 1 is outside the tile's
// experts only where the expert count is odd).
template <class Store>
__device__ __forceinline__ void forEachLogitPair(const float (&acc)[2][8][4], int tokens, int experts, Store&& store) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int t4 = lane & 3;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int e = 64 * (warp >> 2) + 8 * j + 2 * t4;
            const int t = 32 * (warp & 3) + 16 * m + g;
            if (e >= experts) {
                continue;
            }
            const bool both = e + 1 < experts;
            if (t < tokens) {
                store(t, e, acc[m][j][0], acc[m][j][1], both);
            }
            if (t + 8 < tokens) {
                store(t + 8, e, acc[m][j][2], acc[m][j][3], both);
            }
        }
    }
}

// Grid (token tiles, splits, expert tiles). Split s reduces chunks [s * chunks_per_split, ...) of the hidden size
// and writes its partial logits to partial[s, t, e] ([S, T, E] fp32).
__global__ void __launch_bounds__(kLogitsThreads)
    routerLogitsKernel(const uint16_t* x, const uint16_t* gate_w, float* partial, int num_tokens, int hidden,
                       int num_experts, int chunks, int chunks_per_split) {
    extern __shared__ __align__(16) uint16_t smem[];  // [kStages][128 + 128 rows][kRowElems]
    const int t0 = blockIdx.x * kTileTokens;
    const int split = blockIdx.y;
    const int e0 = blockIdx.z * kTileExperts;
    const int c_begin = split * chunks_per_split;
    sm90::gridDependencyWait();  // x is the previous kernel's output
    sm90::launchDependents();
    float acc[2][8][4];
    logitsMainloop(smem, x, gate_w, t0, e0, c_begin, min(chunks_per_split, chunks - c_begin), num_tokens, hidden,
                   num_experts, acc);
    float* out = partial + static_cast<int64_t>(split) * num_tokens * num_experts;
    // An even expert count keeps every pair 8-byte aligned: one float2 store.
    const bool pairs_aligned = (num_experts & 1) == 0;
    forEachLogitPair(acc, num_tokens - t0, num_experts - e0, [&](int t, int e, float v0, float v1, bool both) {
        float* dst = out + static_cast<int64_t>(t0 + t) * num_experts + e0 + e;
        if (pairs_aligned && both) {
            *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        } else {
            dst[0] = v0;
            if (both) {
                dst[1] = v1;
            }
        }
    });
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

// Token t on one warp: lane holds the logits of experts lane + 32 q, logitOf(q) for lane + 32 q < E (written to
// `logits` when it is not null), then the softmax and the top-k.
template <class LogitOf>
__device__ __forceinline__ void routeToken(LogitOf&& logitOf, int lane, int t, int num_experts, float* logits,
                                           int32_t* topk_ids, float* topk_weights, int top_k, bool renormalize) {
    float p[kMaxStripes];
    float max_logit = -INFINITY;
#pragma unroll
    for (int q = 0; q < kMaxStripes; ++q) {
        p[q] = -INFINITY;
        if (lane + 32 * q < num_experts) {
            p[q] = logitOf(q);
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
        if (lane + 32 * q < num_experts) {
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
        p[q] = lane + 32 * q < num_experts ? p[q] / sum : -1.0f;  // -1: not a candidate (probabilities are >= 0)
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

// Many tokens: one warp per token, each lane summing the partials of its experts.
__global__ void __launch_bounds__(kTopkThreads)
    routerTopkWarpKernel(const float* partial, int splits, float* logits, int32_t* topk_ids, float* topk_weights,
                         int num_tokens, int num_experts, int top_k, bool renormalize) {
    sm90::gridDependencyWait();  // the logits kernel's partials
    sm90::launchDependents();
    const int t = blockIdx.x * (kTopkThreads / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (t >= num_tokens) {
        return;
    }
    const int64_t split_stride = static_cast<int64_t>(num_tokens) * num_experts;
    const float* row = partial + static_cast<int64_t>(t) * num_experts + lane;
    routeToken(
        [&](int q) {
            float v = 0.0f;
            for (int s0 = 0; s0 < splits; s0 += kWarpTopkSplits) {
#pragma unroll
                for (int i = 0; i < kWarpTopkSplits; ++i) {
                    v += s0 + i < splits ? row[(s0 + i) * split_stride + 32 * q] : 0.0f;
                }
            }
            return v;
        },
        lane, t, num_experts, logits, topk_ids, topk_weights, top_k, renormalize);
}

// Few tokens: one CTA per token. Each thread of the first shares * E sums the partials of one expert over a share of
// the splits (shares = kTopkThreads / E threads per expert, each taking every shares-th split, eight loads in
// flight), the shares meet in shared memory, then warp 0 takes the token through softmax and top-k (lane holds
// experts lane + 32 q).
__global__ void __launch_bounds__(kTopkThreads)
    routerTopkCtaKernel(const float* partial, int splits, float* logits, int32_t* topk_ids, float* topk_weights,
                        int num_tokens, int num_experts, int top_k, bool renormalize) {
    __shared__ float s_sum[kTopkThreads];
    sm90::gridDependencyWait();  // the logits kernel's partials
    sm90::launchDependents();
    const int t = blockIdx.x;
    const int tid = threadIdx.x;
    const int shares = kTopkThreads / num_experts;  // >= 1: num_experts <= 256; threads past shares * E idle
    const int e = tid % num_experts;
    const int share = tid / num_experts;
    const int64_t split_stride = static_cast<int64_t>(num_tokens) * num_experts;
    const float* src = partial + static_cast<int64_t>(t) * num_experts + e;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int s0 = share; share < shares && s0 < splits; s0 += 8 * shares) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int s = s0 + i * shares;
            if (s < splits) {
                v[i] += src[s * split_stride];
            }
        }
    }
    s_sum[tid] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    __syncthreads();
    if (tid >= 32) {
        return;
    }
    routeToken(
        [&](int q) {
            float sum = 0.0f;
            for (int r = 0; r < shares; ++r) {
                sum += s_sum[r * num_experts + tid + 32 * q];
            }
            return sum;
        },
        tid, t, num_experts, logits, topk_ids, topk_weights, top_k, renormalize);
}

struct Split {
    int chunks;  // 64-element chunks of the hidden size
    int chunks_per_split;
    int splits;     // S: every split has at least one chunk
    bool cta_topk;  // routerTopkCtaKernel (few tokens, many splits), else routerTopkWarpKernel
};

Split routerSplit(int64_t num_tokens, int64_t hidden, int64_t num_experts) {
    Split s;
    s.chunks = static_cast<int>((hidden + kChunk - 1) / kChunk);
    const int64_t tiles =
        ((num_tokens + kTileTokens - 1) / kTileTokens) * ((num_experts + kTileExperts - 1) / kTileExperts);
    s.cta_topk = num_tokens <= kCtaTopkTokens;
    const int64_t target = s.cta_topk ? kSmallTargetCtas : kLargeTargetCtas;
    int splits = 1;
    const int max_splits = s.cta_topk ? kMaxSplits : kMaxSplits / 2;
    while (splits * 2 <= max_splits && splits * 2 <= s.chunks && tiles * splits * 2 <= target) {
        splits *= 2;
    }
    s.chunks_per_split = (s.chunks + splits - 1) / splits;
    s.splits = (s.chunks + s.chunks_per_split - 1) / s.chunks_per_split;
    return s;
}

std::atomic<uint64_t> logits_configured{0};

}  // namespace

size_t routerPartialBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts) {
    const int64_t tokens = std::max<int64_t>(num_tokens, 1);
    return static_cast<size_t>(routerSplit(tokens, hidden, num_experts).splits * tokens * num_experts) * 4;
}

// The partials of every T' <= num_tokens fit (S T' is not monotonic: fewer tokens may take more splits). S changes only
// where the count of token tiles does, so the largest S T' is at the end of a tile or at num_tokens.
size_t routerWorkspaceBytes(int64_t num_tokens, int64_t hidden, int64_t num_experts) {
    const int64_t tokens = std::max<int64_t>(num_tokens, 1);
    int64_t most = 0;
    for (int64_t t = std::min<int64_t>(tokens, kTileTokens);; t = std::min<int64_t>(tokens, t + kTileTokens)) {
        most = std::max<int64_t>(most, static_cast<int64_t>(routerPartialBytes(t, hidden, num_experts)));
        if (t == tokens) {
            break;
        }
    }
    return static_cast<size_t>(most);
}

cudaError_t launchRouter(const RouterParams& params, float* workspace, cudaStream_t stream) {
    const auto* x = static_cast<const uint16_t*>(params.x);
    const auto* gate_w = reinterpret_cast<const uint16_t*>(params.gate_w);
    float* logits = params.logits;
    int32_t* topk_ids = params.topk_ids;
    float* topk_weights = params.topk_weights;
    const int num_tokens = static_cast<int>(params.num_tokens);
    const int hidden = static_cast<int>(params.hidden);
    const int num_experts = static_cast<int>(params.num_experts);
    const int top_k = static_cast<int>(params.top_k);
    const bool renormalize = params.norm_topk_prob;
    if (num_tokens < 1 || hidden % 16 != 0 || num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || top_k > 32 ||
        top_k > num_experts) {
        return cudaErrorInvalidValue;
    }
    cudaError_t err = configureOncePerDevice(logits_configured, [] {
        return cudaFuncSetAttribute(routerLogitsKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kLogitsSmem));
    });
    if (err != cudaSuccess) {
        return err;
    }
    const Split s = routerSplit(num_tokens, hidden, num_experts);
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t config = pdlLaunchConfig(1, kLogitsThreads, stream, true, attr);
    config.gridDim =
        dim3(static_cast<unsigned>((num_tokens + kTileTokens - 1) / kTileTokens), static_cast<unsigned>(s.splits),
             static_cast<unsigned>((num_experts + kTileExperts - 1) / kTileExperts));
    config.dynamicSmemBytes = kLogitsSmem;
    err = cudaLaunchKernelEx(&config, routerLogitsKernel, x, gate_w, workspace, num_tokens, hidden, num_experts,
                             s.chunks, s.chunks_per_split);
    if (err != cudaSuccess) {
        return err;
    }
    const float* partial = workspace;
    if (!s.cta_topk) {
        const cudaLaunchConfig_t topk_config =
            pdlLaunchConfig(static_cast<unsigned>((num_tokens + kTopkThreads / 32 - 1) / (kTopkThreads / 32)),
                            kTopkThreads, stream, true, attr);
        return cudaLaunchKernelEx(&topk_config, routerTopkWarpKernel, partial, s.splits, logits, topk_ids, topk_weights,
                                  num_tokens, num_experts, top_k, renormalize);
    }
    const cudaLaunchConfig_t topk_config =
        pdlLaunchConfig(static_cast<unsigned>(num_tokens), kTopkThreads, stream, true, attr);
    return cudaLaunchKernelEx(&topk_config, routerTopkCtaKernel, partial, s.splits, logits, topk_ids, topk_weights,
                              num_tokens, num_experts, top_k, renormalize);
}

}  // namespace afd::kernels::cuda
