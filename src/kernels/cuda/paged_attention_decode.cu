// The decode kernels (max_q_len == 1; paged_attention_launch.h): split-KV attention of one query row per chunk over
// its paged context, and the combine of the splits' partials.
//
// Grid (plan grid, num_kv_heads * head_blocks, num_seqs), 128 threads. A CTA takes up to 16 query heads of one GQA
// group (the M of its m16n8k16 tiles, padded with zero rows) and, for each of its splits (blockIdx.x, + gridDim.x,
// ...), the split's context positions [split * split_tokens, …) (split_tokens from the chunk's own length:
// decodeSplitTokens), so every K/V byte of a KV head is read once per 16 query heads. Chunks of more than one query
// row are the prefill kernel's, even in the same call. Its 4 warps stream 16-token sub-tiles of that range in turn
// (sub-tile k of the split to warp k % 4), each through its own ring of kStages shared-memory stages filled by 16-byte
// cp.async from the pages (the page of each of its sub-tiles is loaded up front, one per lane), with its own online
// softmax state; at the end the warps merge their (max, sum, accumulator) through shared memory. A sequence with one
// split writes its bf16 output directly; otherwise each split writes o / l and the log2-domain lse to the workspace and
// the combine kernel (launched with programmatic dependent launch) merges them.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/paged_attention_device.cuh"
#include "kernels/cuda/paged_attention_launch.h"

namespace afd::kernels::cuda {
namespace {

using namespace attn;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kSubTile = 16;  // context tokens per warp step (one page or part of one: pages are >= 16 tokens)
constexpr int kHeads = kDecodeHeadsPerCta;

template <int HD>
struct DecodeShape {
    static constexpr int kStages = HD <= 32 ? 6 : (HD == 64 ? 4 : (HD == 128 ? 3 : 2));
    // Rows padded by 16 bytes: the 8 rows of an ldmatrix phase land in 8 distinct 16-byte bank groups.
    static constexpr int kRowBytes = HD * 2 + 16;
    static constexpr int kChunks = HD / 8;  // 16-byte chunks per row
    static constexpr int kTileBytes = kSubTile * kRowBytes;
    static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
    static constexpr int kQBytes = kHeads * kRowBytes;
    static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
    static constexpr int kMergeStride = HD + 4;  // floats per merged row
    static constexpr int kMergeBytes = kWarps * kHeads * (2 + kMergeStride) * 4;
    static constexpr int kSmemBytes = kQBytes + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes);
    static constexpr bool kQInRegisters = HD <= 128;
};

__device__ __forceinline__ void storeBf16x4(uint16_t* dst, float a, float b, float c, float d) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(packBf16(a, b), packBf16(c, d));
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 2) pagedDecodeKernel(const PagedAttnArgs a) {
    using Sh = DecodeShape<HD>;
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int kvh = blockIdx.y / a.head_blocks;
    const int head_block = blockIdx.y - kvh * a.head_blocks;
    const int seq = blockIdx.z;
    launchDependents();  // the combine kernel may start its prologue (it waits for this grid before reading)

    const int q0 = a.q_start[seq];
    const int n = a.q_start[seq + 1] - q0;
    const int len = clampedSeqLen(a, seq);
    if (n != 1) {  // no row, or a prefill chunk
        return;
    }
    const int row = q0;
    const int head0 = kvh * a.group + head_block * kHeads;
    const int heads = min(kHeads, a.group - head_block * kHeads);
    if (len == 0) {  // a padding chunk: zeros
        if (blockIdx.x == 0) {
            for (int idx = tid; idx < heads * Sh::kChunks; idx += kThreads) {
                const int r = idx / Sh::kChunks;
                const int c = idx - r * Sh::kChunks;
                *reinterpret_cast<uint4*>(a.out + (static_cast<int64_t>(row) * a.num_heads + head0 + r) * HD + c * 8) =
                    make_uint4(0, 0, 0, 0);
            }
        }
        return;
    }
    const int split_tokens = decodeSplitTokens(len);
    const int num_splits = min(decodeSplits(len), a.splits);
    for (int split = blockIdx.x; split < num_splits; split += gridDim.x) {
        const int begin = split * split_tokens;
        const int end = min(len, begin + split_tokens);
        // The page of this lane's sub-tile (lane k: the warp's k-th; a split has at most 32 per warp).
        int page = -1;
        {
            const int tok = begin + (lane * kWarps + warp) * kSubTile;
            if (tok < end) {
                page = a.block_tables[static_cast<int64_t>(seq) * a.max_blocks_per_seq + (tok >> a.block_size_log2)];
            }
        }

        const uint32_t q_smem = smemAddr(smem);
        const uint32_t warp_ring = q_smem + Sh::kQBytes + warp * Sh::kStages * Sh::kStageBytes;
        for (int idx = tid; idx < kHeads * Sh::kChunks; idx += kThreads) {
            const int r = idx / Sh::kChunks;
            const int c = idx - r * Sh::kChunks;
            const bool valid = r < heads;
            const uint16_t* src =
                a.q + (static_cast<int64_t>(row) * a.num_heads + head0 + (valid ? r : 0)) * HD + c * 8;
            cpAsync16(q_smem + r * Sh::kRowBytes + c * 16, src, valid);
        }
        cpAsyncCommit();

        const int num_sub = (end - begin + kSubTile - 1) / kSubTile;
        const int my_sub = warp < num_sub ? (num_sub - warp + kWarps - 1) / kWarps : 0;
        const int64_t token_stride = static_cast<int64_t>(a.num_kv_heads) * HD;
        const int block_mask = (1 << a.block_size_log2) - 1;
        // Sub-tile k of this warp into `stage`; always commits a group (empty past the warp's last sub-tile).
        auto issue = [&](int k, int stage) {
            if (k < my_sub) {
                const int tok0 = begin + (k * kWarps + warp) * kSubTile;
                const int pg = __shfl_sync(0xffffffffu, page, k);
                const int64_t base =
                    pg < 0 ? 0
                           : ((static_cast<int64_t>(pg) << a.block_size_log2) + (tok0 & block_mask)) * token_stride +
                                 kvh * HD;
                const uint32_t k_dst = warp_ring + stage * Sh::kStageBytes;
                const uint32_t v_dst = k_dst + Sh::kTileBytes;
#pragma unroll
                for (int i = 0; i < kSubTile * Sh::kChunks / 32; ++i) {
                    const int idx = lane + 32 * i;
                    const int r = idx / Sh::kChunks;
                    const int c = idx - r * Sh::kChunks;
                    const bool valid = pg >= 0 && tok0 + r < end;
                    const int64_t off = valid ? base + r * token_stride + c * 8 : 0;
                    const uint32_t dst = r * Sh::kRowBytes + c * 16;
                    cpAsync16(k_dst + dst, a.k_cache + off, valid);
                    cpAsync16(v_dst + dst, a.v_cache + off, valid);
                }
            }
            cpAsyncCommit();
        };
#pragma unroll
        for (int k = 0; k < Sh::kStages - 1; ++k) {
            issue(k, k);
        }
        cpAsyncWait<Sh::kStages - 1>();  // the Q group (the oldest)
        __syncthreads();

        // ldmatrix lane addresses: Q as the A operand (rows = heads), K as B non-transposed, V as B transposed.
        const uint32_t q_lane = q_smem + (lane & 15) * Sh::kRowBytes + (lane >> 4) * 16;
        const uint32_t k_lane = ((lane & 7) + ((lane >> 4) << 3)) * Sh::kRowBytes + ((lane >> 3) & 1) * 16;
        const uint32_t v_lane = ((lane & 7) + (((lane >> 3) & 1) << 3)) * Sh::kRowBytes + (lane >> 4) * 16;
        uint32_t qa[Sh::kQInRegisters ? HD / 16 : 1][4];
        if constexpr (Sh::kQInRegisters) {
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                ldsmX4(qa[kk], q_lane + kk * 32);
            }
        }

        float o[HD / 8][4];
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
            o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        }
        float m[2] = {-INFINITY, -INFINITY};
        float l[2] = {0.0f, 0.0f};
        int stage = 0;
        int issue_stage = Sh::kStages - 1;
        for (int k = 0; k < my_sub; ++k) {
            cpAsyncWait<Sh::kStages - 2>();
            __syncwarp();  // every lane's copies of sub-tile k are visible; every lane is done with sub-tile k - 1
            issue(k + Sh::kStages - 1, issue_stage);
            issue_stage = issue_stage + 1 == Sh::kStages ? 0 : issue_stage + 1;

            const uint32_t k_tile = warp_ring + stage * Sh::kStageBytes;
            const uint32_t v_tile = k_tile + Sh::kTileBytes;
            float s[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                s[i] = 0.0f;
            }
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                uint32_t b[4];
                ldsmX4(b, k_tile + k_lane + kk * 32);
                if constexpr (Sh::kQInRegisters) {
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s), qa[kk], b[0], b[1]);
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s + 4), qa[kk], b[2], b[3]);
                } else {
                    uint32_t q_frag[4];
                    ldsmX4(q_frag, q_lane + kk * 32);
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s), q_frag, b[0], b[1]);
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s + 4), q_frag, b[2], b[3]);
                }
            }
            const int tok0 = begin + (k * kWarps + warp) * kSubTile;
            float alpha[2];
            const int limit[2] = {end - 1, end - 1};
            if (tok0 + kSubTile > end) {
                softmaxTile<kSubTile, true>(*reinterpret_cast<float(*)[8]>(s), m, l, alpha, limit, tok0, a.scale_log2);
            } else {
                softmaxTile<kSubTile, false>(*reinterpret_cast<float(*)[8]>(s), m, l, alpha, limit, tok0, a.scale_log2);
            }
#pragma unroll
            for (int j = 0; j < HD / 8; ++j) {
                o[j][0] *= alpha[0];
                o[j][1] *= alpha[0];
                o[j][2] *= alpha[1];
                o[j][3] *= alpha[1];
            }
            const uint32_t pa[4] = {packBf16(s[0], s[1]), packBf16(s[2], s[3]), packBf16(s[4], s[5]),
                                    packBf16(s[6], s[7])};
#pragma unroll
            for (int jj = 0; jj < HD / 16; ++jj) {
                uint32_t b[4];
                ldsmX4Trans(b, v_tile + v_lane + jj * 32);
                mmaBf16(o[2 * jj], pa, b[0], b[1]);
                mmaBf16(o[2 * jj + 1], pa, b[2], b[3]);
            }
            stage = stage + 1 == Sh::kStages ? 0 : stage + 1;
        }
        cpAsyncWait<0>();
        l[0] = quadSum(l[0]);
        l[1] = quadSum(l[1]);

        // Merge the warps: (m, l) per row, then the rescaled sum of their accumulators.
        __syncthreads();  // every warp is done with its ring (the merge area overlaps it)
        float* merge_m = reinterpret_cast<float*>(smem + Sh::kQBytes);
        float* merge_l = merge_m + kWarps * kHeads;
        float* merge_o = merge_l + kWarps * kHeads;
        const int g = lane >> 2;
        const int t = lane & 3;
        if (t == 0) {
            merge_m[warp * kHeads + g] = m[0];
            merge_m[warp * kHeads + g + 8] = m[1];
            merge_l[warp * kHeads + g] = l[0];
            merge_l[warp * kHeads + g + 8] = l[1];
        }
        float* my_o = merge_o + warp * kHeads * Sh::kMergeStride;
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
            *reinterpret_cast<float2*>(my_o + g * Sh::kMergeStride + 8 * j + 2 * t) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2*>(my_o + (g + 8) * Sh::kMergeStride + 8 * j + 2 * t) =
                make_float2(o[j][2], o[j][3]);
        }
        __syncthreads();

        const int64_t part_row = (static_cast<int64_t>(seq) * a.splits + split) * a.num_heads + head0;
        for (int idx = tid; idx < kHeads * (HD / 4); idx += kThreads) {
            const int r = idx / (HD / 4);
            const int c = (idx - r * (HD / 4)) * 4;
            if (r >= heads) {
                continue;
            }
            float mx = -INFINITY;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) {
                mx = fmaxf(mx, merge_m[w * kHeads + r]);
            }
            float sum = 0.0f;
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (mx != -INFINITY) {
#pragma unroll
                for (int w = 0; w < kWarps; ++w) {
                    const float f = fastExp2(merge_m[w * kHeads + r] - mx);
                    sum += f * merge_l[w * kHeads + r];
                    const float4 v =
                        *reinterpret_cast<const float4*>(merge_o + (w * kHeads + r) * Sh::kMergeStride + c);
                    acc.x += f * v.x;
                    acc.y += f * v.y;
                    acc.z += f * v.z;
                    acc.w += f * v.w;
                }
            }
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            if (num_splits == 1) {
                storeBf16x4(a.out + (static_cast<int64_t>(row) * a.num_heads + head0 + r) * HD + c, acc.x * inv,
                            acc.y * inv, acc.z * inv, acc.w * inv);
            } else {
                *reinterpret_cast<float4*>(a.part_o + (part_row + r) * HD + c) =
                    make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
                if (c == 0) {
                    a.part_lse[part_row + r] = sum > 0.0f ? mx + __log2f(sum) : -INFINITY;
                }
            }
        }
        __syncthreads();  // the next split's Q and ring stages overwrite the merge area
    }
}

__device__ __forceinline__ float blockReduce(float v, bool is_max, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float r = scratch[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
        r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
    }
    __syncthreads();  // scratch is reused by the next reduction
    return r;
}

// Grid (num_heads, num_seqs), 128 threads: out[row, h] = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max) over the
// chunk's splits (nothing for a chunk of one split: the decode kernel wrote it). Dynamic shared memory: `splits`
// floats.
template <int HD>
__global__ void __launch_bounds__(kThreads) pagedDecodeCombineKernel(const PagedAttnArgs a) {
    extern __shared__ float weights[];
    __shared__ float scratch[kWarps];
    __shared__ float4 partial[kThreads];
    const int h = blockIdx.x;
    const int seq = blockIdx.y;
    const int tid = threadIdx.x;
    gridDependencyWait();
    const int q0 = a.q_start[seq];
    const int n = a.q_start[seq + 1] - q0;
    if (n <= 0) {
        return;
    }
    const int len = clampedSeqLen(a, seq);
    if (len == 0) {
        return;
    }
    const int num_splits = min(decodeSplits(len), a.splits);
    if (n != 1 || num_splits <= 1) {
        return;
    }
    const int row = q0;
    const int64_t first = static_cast<int64_t>(seq) * a.splits * a.num_heads + h;  // split s: first + s * num_heads
    float mx = -INFINITY;
    for (int s = tid; s < num_splits; s += kThreads) {
        const float v = a.part_lse[first + static_cast<int64_t>(s) * a.num_heads];
        weights[s] = v;
        mx = fmaxf(mx, v);
    }
    mx = blockReduce(mx, true, scratch);
    float sum = 0.0f;
    for (int s = tid; s < num_splits; s += kThreads) {
        const float w = mx == -INFINITY ? 0.0f : fastExp2(weights[s] - mx);
        weights[s] = w;
        sum += w;
    }
    sum = blockReduce(sum, false, scratch);  // its barriers also publish `weights`
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;

    constexpr int kGroups = HD / 4;             // float4 columns
    constexpr int kLanes = kThreads / kGroups;  // threads per column, each summing every kLanes-th split
    const int col = tid % kGroups;
    const int sub = tid / kGroups;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int s = sub; s < num_splits; s += kLanes) {
        const float w = weights[s];
        const float4 v =
            *reinterpret_cast<const float4*>(a.part_o + (first + static_cast<int64_t>(s) * a.num_heads) * HD + col * 4);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
    }
    partial[tid] = acc;
    __syncthreads();
    if (sub == 0) {
#pragma unroll
        for (int k = 1; k < kLanes; ++k) {
            const float4 v = partial[k * kGroups + col];
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        storeBf16x4(a.out + (static_cast<int64_t>(row) * a.num_heads + h) * HD + col * 4, acc.x * inv, acc.y * inv,
                    acc.z * inv, acc.w * inv);
    }
}

template <int HD>
cudaError_t launchDecode(const PagedAttnArgs& a, int grid_x, cudaStream_t stream) {
    using Sh = DecodeShape<HD>;
    static std::atomic<uint64_t> configured{0};
    cudaError_t err = allowDynamicSmemOnce(pagedDecodeKernel<HD>, Sh::kSmemBytes, configured);
    if (err != cudaSuccess) {
        return err;
    }
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(a.num_kv_heads * a.head_blocks),
                    static_cast<unsigned>(a.num_seqs));
    pagedDecodeKernel<HD><<<grid, kThreads, Sh::kSmemBytes, stream>>>(a);
    err = cudaGetLastError();
    if (err != cudaSuccess || a.splits <= 1) {
        return err;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(a.num_heads), static_cast<unsigned>(a.num_seqs));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(a.splits) * sizeof(float);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, pagedDecodeCombineKernel<HD>, a);
}

}  // namespace

cudaError_t launchPagedDecode(const PagedAttentionCudaParams& p, const DecodeSplitPlan& plan, cudaStream_t stream) {
    PagedAttnArgs a = makePagedAttnArgs(p);
    a.head_blocks = (a.group + kHeads - 1) / kHeads;
    a.splits = plan.splits;
    if (plan.splits > 1) {
        a.part_o = static_cast<float*>(p.workspace);
        a.part_lse = a.part_o + static_cast<size_t>(p.num_seqs) * plan.splits * p.num_heads * p.head_dim;
    }
    switch (p.head_dim) {
        case 16:
            return launchDecode<16>(a, plan.grid, stream);
        case 32:
            return launchDecode<32>(a, plan.grid, stream);
        case 64:
            return launchDecode<64>(a, plan.grid, stream);
        case 128:
            return launchDecode<128>(a, plan.grid, stream);
        case 256:
            return launchDecode<256>(a, plan.grid, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace afd::kernels::cuda
