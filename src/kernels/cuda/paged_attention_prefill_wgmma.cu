// The wgmma prefill kernel (paged_attention_launch.h), head_dim 64, 128 and 256: causal attention of 128-row query
// tiles over the paged cache with Hopper warpgroup MMAs.
//
// Persistent grid of one CTA per SM, 256 threads = two warpgroups of 64 query rows each (rows: a chunk's (token,
// head-in-group) pairs flattened token-major, so one K/V tile serves the whole GQA group). KV tiles of kN tokens are
// gathered from the pages by 16-byte cp.async (every thread copies one 16-byte chunk of 4 rows of K and V, the rows'
// block-table entries loaded a tile ahead) into a ring of kStages stages in the 128-byte-swizzled layout wgmma reads:
// rows of 128 bytes (64 elements of head_dim), 64-element column blocks one after the other. Q sits in the same
// layout. Per warpgroup and KV tile j: S(j+1) = Q K(j+1)^T (wgmma, both operands in shared memory, K-major) is issued
// together with O += P(j) V(j) (A = P from registers, V MN-major), and the softmax of S(j+1) runs while the P V
// product is in flight. One CTA barrier per tile publishes the landed tile and frees the oldest stage for the next
// copy. The causal mask is applied only to tiles that reach past the tile's first row position; tiles past its last
// row position are never loaded. Epilogue: o / l in bf16 through the warpgroup's Q rows, 16-byte stores.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/paged_attention_device.cuh"
#include "kernels/cuda/paged_attention_launch.h"
#include "kernels/cuda/paged_attention_wgmma.cuh"

namespace afd::kernels::cuda {
namespace {

using namespace attn;

constexpr int kThreads = 256;
constexpr int kRows = 128;  // query rows per work item (64 per warpgroup)
constexpr int kPrefixPerThread = (kPrefillMaxSeqs + kThreads - 1) / kThreads;

template <int HD>
struct WgmmaShape {
    static constexpr int kN = HD == 64 ? 128 : (HD == 128 ? 64 : 32);  // KV tokens per tile
    static constexpr int kStages = 4;
    static constexpr int kChunks = HD / 8;             // 16-byte chunks per row
    static constexpr int kQBlockStride = kRows * 128;  // bytes between 64-column blocks of the Q tile
    static constexpr int kKvBlockStride = kN * 128;    // … of a K or V tile
    static constexpr int kQBytes = kRows * HD * 2;
    static constexpr int kTileBytes = kN * HD * 2;
    static constexpr int kStageBytes = 2 * kTileBytes;                                   // K then V
    static constexpr int kFixedBytes = 1024 + kQBytes + kStages * kStageBytes + 16 * 4;  // + alignment, warp sums
    static constexpr int kQCopies = kRows * kChunks / kThreads;
    static constexpr int kKvCopies = kN * kChunks / kThreads;
    static_assert(kKvCopies >= 1 && kThreads % kChunks == 0, "copy assignment");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose 64-column blocks are `block_stride`
// bytes apart.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int block_stride) {
    return (chunk >> 3) * block_stride + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

template <int N>
__device__ __forceinline__ void fenceAll(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        fenceOperand(r[i]);
    }
}
template <int N>
__device__ __forceinline__ void fenceAll(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            fenceOperand(r[i][k]);
        }
    }
}

// S = Q K^T for this warpgroup's 64 rows: HD / 16 k-steps of m64 n(kN) k16 (not committed).
template <int HD>
__device__ __forceinline__ void issueScores(float (&s)[WgmmaShape<HD>::kN / 2], uint32_t q_rows, uint32_t k_tile) {
    using Sh = WgmmaShape<HD>;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const uint64_t desc_q = smemDesc(q_rows + (kk >> 2) * Sh::kQBlockStride + (kk & 3) * 32, 16, 1024);
        const uint64_t desc_k = smemDesc(k_tile + (kk >> 2) * Sh::kKvBlockStride + (kk & 3) * 32, 16, 1024);
        WgmmaSS<Sh::kN>::mma(s, desc_q, desc_k, kk > 0 ? 1 : 0);
    }
}

// O += P V: kN / 16 k-steps of m64 n(HD) k16 (not committed).
template <int HD>
__device__ __forceinline__ void issueValues(float (&o)[HD / 2], const uint32_t (&p)[WgmmaShape<HD>::kN / 16][4],
                                            uint32_t v_tile) {
    using Sh = WgmmaShape<HD>;
#pragma unroll
    for (int kv = 0; kv < Sh::kN / 16; ++kv) {
        WgmmaRS<HD>::mma(o, p[kv], smemDesc(v_tile + kv * 2048, Sh::kKvBlockStride, 1024));
    }
}

// The weights of an S tile as the A fragments of the P V product (k-step kv: the tile's columns 16 kv … 16 kv + 15).
template <int kN>
__device__ __forceinline__ void packWeights(uint32_t (&p)[kN / 16][4], const float (&s)[kN / 2]) {
#pragma unroll
    for (int kv = 0; kv < kN / 16; ++kv) {
        p[kv][0] = packBf16(s[8 * kv], s[8 * kv + 1]);
        p[kv][1] = packBf16(s[8 * kv + 2], s[8 * kv + 3]);
        p[kv][2] = packBf16(s[8 * kv + 4], s[8 * kv + 5]);
        p[kv][3] = packBf16(s[8 * kv + 6], s[8 * kv + 7]);
    }
}

template <int HD>
__device__ __forceinline__ void rescale(float (&o)[HD / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
        o[4 * j] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 1) pagedPrefillWgmmaKernel(const PagedAttnArgs a) {
    using Sh = WgmmaShape<HD>;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    // NOTE: the swizzle atoms need 1024-byte alignment, which the dynamic shared memory base does not promise.
    const uint32_t raw = smemAddr(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    uint8_t* const base_ptr = smem_raw + (base - raw);
    const uint32_t q_smem = base;
    const uint32_t ring = base + Sh::kQBytes;
    int* warp_sums = reinterpret_cast<int*>(base_ptr + Sh::kQBytes + Sh::kStages * Sh::kStageBytes);
    int* prefix = warp_sums + 16;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int wg = tid >> 7;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int local_row = wg * 64 + ((tid >> 5) & 3) * 16 + g;  // this thread's rows: local_row, local_row + 8
    const uint32_t q_rows = q_smem + wg * 64 * 128;             // this warpgroup's A operand

    buildTilePrefix<kThreads, kPrefixPerThread>(a.q_start, a.num_seqs, a.group, kRows, a.skip_single_rows != 0, prefix,
                                                warp_sums);
    const int items = prefix[a.num_seqs] * a.num_kv_heads;

    const int copy_chunk = tid % Sh::kChunks;  // the same chunk of every row this thread copies
    const int copy_row = tid / Sh::kChunks;
    constexpr int kRowStep = kThreads / Sh::kChunks;

    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        __syncthreads();  // the previous item is done with shared memory
        const PrefillItem it = prefillItem(a, prefix, item, kRows);
        const int f0 = it.row0 + local_row;
        const int pos[2] = {rowPosition(it, a.group, f0), rowPosition(it, a.group, f0 + 8)};
        const int p_first = rowPosition(it, a.group, it.row0);
        const int p_last = rowPosition(it, a.group, min(it.row0 + kRows - 1, it.rows - 1));
        const int num_tiles = p_last < 0 ? 0 : p_last / Sh::kN + 1;
        const int unmasked_tiles = p_first < 0 ? 0 : (p_first + 1) / Sh::kN;

        // Element offsets of this thread's KV rows of `tile` (-1: zero-fill), and the copies of a tile.
        auto row_offsets = [&](int tile, int64_t(&off)[Sh::kKvCopies]) {
#pragma unroll
            for (int i = 0; i < Sh::kKvCopies; ++i) {
                off[i] = tile < num_tiles
                             ? kvRowOffset(a, it.chunk, tile * Sh::kN + copy_row + i * kRowStep, it.len, it.kvh, HD)
                             : -1;
            }
        };
        auto issue_kv = [&](int tile, int stage, const int64_t(&off)[Sh::kKvCopies]) {
            if (tile < num_tiles) {
                const uint32_t k_dst = ring + stage * Sh::kStageBytes;
#pragma unroll
                for (int i = 0; i < Sh::kKvCopies; ++i) {
                    const uint32_t dst = k_dst + swizzled(copy_row + i * kRowStep, copy_chunk, Sh::kKvBlockStride);
                    const int64_t src = off[i] < 0 ? 0 : off[i] + copy_chunk * 8;
                    cpAsync16(dst, a.k_cache + src, off[i] >= 0);
                    cpAsync16(dst + Sh::kTileBytes, a.v_cache + src, off[i] >= 0);
                }
            }
            cpAsyncCommit();
        };

        float o[HD / 2];
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) {
            o[i] = 0.0f;
        }
        float m[2] = {-INFINITY, -INFINITY};
        float l[2] = {0.0f, 0.0f};
        if (num_tiles > 0) {
            // Prologue: Q with tile 0 (one group), tiles 1 … kStages - 2, the offsets of tile kStages - 1.
#pragma unroll
            for (int i = 0; i < Sh::kQCopies; ++i) {
                const int r = copy_row + i * kRowStep;
                const int f = it.row0 + r;
                const bool valid = f < it.rows;
                const int token = valid ? f / a.group : 0;
                const int head = it.kvh * a.group + (valid ? f - token * a.group : 0);
                const uint16_t* src =
                    a.q + (static_cast<int64_t>(it.q0 + token) * a.num_heads + head) * HD + copy_chunk * 8;
                cpAsync16(q_smem + swizzled(r, copy_chunk, Sh::kQBlockStride), src, valid);
            }
            int64_t off[Sh::kKvCopies];
#pragma unroll
            for (int tile = 0; tile < Sh::kStages - 1; ++tile) {
                row_offsets(tile, off);
                issue_kv(tile, tile, off);
            }
            row_offsets(Sh::kStages - 1, off);

            cpAsyncWait<Sh::kStages - 2>();
            fenceProxyAsyncShared();
            __syncthreads();  // Q and tile 0 are visible to the async proxy of every warpgroup
            float s[Sh::kN / 2];
            wgmmaFence();
            issueScores<HD>(s, q_rows, ring);
            wgmmaCommit();
            wgmmaWait<0>();
            fenceAll(s);
            float alpha[2];
            if (0 >= unmasked_tiles) {
                softmaxTile<Sh::kN, true>(s, m, l, alpha, pos, 0, a.scale_log2);
            } else {
                softmaxTile<Sh::kN, false>(s, m, l, alpha, pos, 0, a.scale_log2);
            }
            uint32_t p[Sh::kN / 16][4];
            packWeights<Sh::kN>(p, s);

            // NOTE: the loop body is straight-line (every step has a next tile): a conditional score product made
            // ptxas serialize the wgmma (C7514) where the softmax reads the scores while P V is in flight.
            int stage = 0;
            int issue_stage = Sh::kStages - 1;
            for (int j = 0; j + 1 < num_tiles; ++j) {
                const int next_stage = stage + 1 == Sh::kStages ? 0 : stage + 1;
                cpAsyncWait<Sh::kStages - 3>();
                fenceProxyAsyncShared();
                __syncthreads();  // tile j + 1 is visible; every warpgroup is done with tile j - 1 (its stage)
                fenceAll(o);
                fenceAll(p);
                fenceAll(s);
                wgmmaFence();
                issueScores<HD>(s, q_rows, ring + next_stage * Sh::kStageBytes);
                wgmmaCommit();
                issueValues<HD>(o, p, ring + stage * Sh::kStageBytes + Sh::kTileBytes);
                wgmmaCommit();
                // The copies of tile j + kStages - 1 into the freed stage go out while the products run.
                issue_kv(j + Sh::kStages - 1, issue_stage, off);
                row_offsets(j + Sh::kStages, off);
                issue_stage = issue_stage + 1 == Sh::kStages ? 0 : issue_stage + 1;
                wgmmaWait<1>();  // the scores (the older group)
                fenceAll(s);
                if (j + 1 >= unmasked_tiles) {
                    softmaxTile<Sh::kN, true>(s, m, l, alpha, pos, (j + 1) * Sh::kN, a.scale_log2);
                } else {
                    softmaxTile<Sh::kN, false>(s, m, l, alpha, pos, (j + 1) * Sh::kN, a.scale_log2);
                }
                wgmmaWait<0>();
                fenceAll(o);
                fenceAll(p);
                rescale<HD>(o, alpha);
                packWeights<Sh::kN>(p, s);
                stage = next_stage;
            }
            // The last tile's P V (its stage was published by the previous step's barrier, or the prologue's).
            fenceAll(o);
            fenceAll(p);
            wgmmaFence();
            issueValues<HD>(o, p, ring + stage * Sh::kStageBytes + Sh::kTileBytes);
            wgmmaCommit();
            wgmmaWait<0>();
            fenceAll(o);
            fenceAll(p);
            cpAsyncWait<0>();
        }

        // Epilogue: o / l in bf16 into this warpgroup's Q rows (its wgmma are done with them), then 16-byte stores.
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float sum = quadSum(l[r]);
            inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = local_row + 8 * r;
                *reinterpret_cast<uint32_t*>(base_ptr + swizzled(row, j, Sh::kQBlockStride) + 4 * t) =
                    packBf16(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
            }
        }
        namedBarrierSync(1 + wg, 128);
        const int wtid = tid & 127;
#pragma unroll
        for (int i = 0; i < 64 * Sh::kChunks / 128; ++i) {
            const int idx = wtid + 128 * i;
            const int row = wg * 64 + idx / Sh::kChunks;
            const int c = idx % Sh::kChunks;
            const int f = it.row0 + row;
            if (f < it.rows) {
                const int token = f / a.group;
                const int head = it.kvh * a.group + (f - token * a.group);
                *reinterpret_cast<uint4*>(a.out + (static_cast<int64_t>(it.q0 + token) * a.num_heads + head) * HD +
                                          c * 8) =
                    *reinterpret_cast<const uint4*>(base_ptr + swizzled(row, c, Sh::kQBlockStride));
            }
        }
    }
}

template <int HD>
cudaError_t launchFor(const PagedAttnArgs& a, int sm_count, int64_t item_bound, cudaStream_t stream) {
    using Sh = WgmmaShape<HD>;
    static std::atomic<uint64_t> configured{0};
    const int smem = Sh::kFixedBytes + (a.num_seqs + 1) * 4;
    const int max_smem = Sh::kFixedBytes + (kPrefillMaxSeqs + 1) * 4;
    cudaError_t err = allowDynamicSmemOnce(pagedPrefillWgmmaKernel<HD>, max_smem, configured);
    if (err != cudaSuccess) {
        return err;
    }
    const int64_t grid = std::max<int64_t>(std::min<int64_t>(item_bound, sm_count), 1);
    pagedPrefillWgmmaKernel<HD><<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

bool pagedPrefillWgmmaSupports(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

cudaError_t launchPagedPrefillWgmma(const PagedAttentionCudaParams& p, int sm_count, bool skip_single_rows,
                                    cudaStream_t stream) {
    PagedAttnArgs a = makePagedAttnArgs(p);
    a.skip_single_rows = skip_single_rows ? 1 : 0;
    const int64_t rows = static_cast<int64_t>(p.num_seqs) * p.max_q_len * a.group;
    const int64_t item_bound = (rows / kRows + p.num_seqs) * p.num_kv_heads;
    switch (p.head_dim) {
        case 64:
            return launchFor<64>(a, sm_count, item_bound, stream);
        case 128:
            return launchFor<128>(a, sm_count, item_bound, stream);
        case 256:
            return launchFor<256>(a, sm_count, item_bound, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace afd::kernels::cuda
