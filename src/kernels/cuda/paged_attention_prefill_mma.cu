// The mma.sync prefill kernel (paged_attention_launch.h): FlashAttention-2-style causal attention of query row tiles
// over the paged cache, for every head_dim (the path for 16 and 32, and the reference the wgmma kernel is tested
// beside).
//
// Persistent grid; 128 threads. A work item is a tile of 64 query rows of one chunk and one KV head, the rows being
// the chunk's (token, head-in-group) pairs flattened token-major, so one K/V tile serves the whole GQA group. Each
// warp owns 16 rows. KV tiles of kN tokens are gathered from the pages by 16-byte cp.async into a kStages ring of
// padded shared-memory rows (ldmatrix without bank conflicts); S = Q K^T and O += P V run as m16n8k16 bf16 MMAs with
// fp32 accumulators, the online softmax in registers. Tiles wholly before the tile's first row position skip the
// causal mask; tiles past its last row position are never loaded.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/paged_attention_device.cuh"
#include "kernels/cuda/paged_attention_launch.h"

namespace afd::kernels::cuda {
namespace {

using namespace attn;

constexpr int kThreads = 128;
constexpr int kRows = 64;  // query rows per work item (16 per warp)
constexpr int kPrefixPerThread = (kPrefillMaxSeqs + kThreads - 1) / kThreads;

template <int HD>
struct MmaShape {
    static constexpr int kN = HD == 256 ? 32 : 64;  // KV tokens per tile
    static constexpr int kStages = HD <= 64 ? 3 : 2;
    static constexpr int kRowBytes = HD * 2 + 16;  // padded rows
    static constexpr int kChunks = HD / 8;
    static constexpr int kQBytes = kRows * kRowBytes;
    static constexpr int kTileBytes = kN * kRowBytes;
    static constexpr int kStageBytes = 2 * kTileBytes;                            // K then V
    static constexpr int kFixedBytes = kQBytes + kStages * kStageBytes + 16 * 4;  // + warp sums of the prefix scan
    static constexpr int kKvCopies = kN * kChunks / kThreads;  // 16-byte copies per thread per tile and tensor
    static constexpr int kQCopies = kRows * kChunks / kThreads;
    static_assert(kKvCopies >= 1 && kQCopies >= 1, "tile too small for the CTA");
};

template <int HD>
__global__ void __launch_bounds__(kThreads) pagedPrefillMmaKernel(const PagedAttnArgs a) {
    using Sh = MmaShape<HD>;
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t q_smem = smemAddr(smem);
    const uint32_t ring = q_smem + Sh::kQBytes;
    int* warp_sums = reinterpret_cast<int*>(smem + Sh::kQBytes + Sh::kStages * Sh::kStageBytes);
    int* prefix = warp_sums + 16;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;

    buildTilePrefix<kThreads, kPrefixPerThread>(a.q_start, a.num_seqs, a.group, kRows, a.skip_single_rows != 0, prefix,
                                                warp_sums);
    const int items = prefix[a.num_seqs] * a.num_kv_heads;

    const uint32_t q_lane = q_smem + (warp * 16 + (lane & 15)) * Sh::kRowBytes + (lane >> 4) * 16;
    const uint32_t k_lane = ((lane & 7) + ((lane >> 4) << 3)) * Sh::kRowBytes + ((lane >> 3) & 1) * 16;
    const uint32_t v_lane = ((lane & 7) + (((lane >> 3) & 1) << 3)) * Sh::kRowBytes + (lane >> 4) * 16;
    const int copy_chunk = tid % Sh::kChunks;  // the same chunk of every row this thread copies
    const int copy_row = tid / Sh::kChunks;
    constexpr int kRowStep = kThreads / Sh::kChunks;

    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        __syncthreads();  // the previous item is done with shared memory
        const PrefillItem it = prefillItem(a, prefix, item, kRows);
        const int f0 = it.row0 + warp * 16 + g;
        const int pos[2] = {rowPosition(it, a.group, f0), rowPosition(it, a.group, f0 + 8)};
        const int p_first = rowPosition(it, a.group, it.row0);
        const int p_last = rowPosition(it, a.group, min(it.row0 + kRows - 1, it.rows - 1));
        const int num_tiles = p_last < 0 ? 0 : p_last / Sh::kN + 1;
        const int unmasked_tiles = p_first < 0 ? 0 : (p_first + 1) / Sh::kN;

        // Copies of the Q tile (rows past the chunk zero-filled; committed with KV tile 0) and of KV tile `tile` into
        // `stage` (one group each, empty past the last tile).
        auto issue_q = [&]() {
#pragma unroll
            for (int i = 0; i < Sh::kQCopies; ++i) {
                const int r = copy_row + i * kRowStep;
                const int f = it.row0 + r;
                const bool valid = f < it.rows;
                const int token = valid ? f / a.group : 0;
                const int head = it.kvh * a.group + (valid ? f - token * a.group : 0);
                const uint16_t* src =
                    a.q + (static_cast<int64_t>(it.q0 + token) * a.num_heads + head) * HD + copy_chunk * 8;
                cpAsync16(q_smem + r * Sh::kRowBytes + copy_chunk * 16, src, valid);
            }
        };
        // Element offsets of this thread's KV rows of `tile` (-1: zero-fill), loaded a tile before their copies.
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
                    const int r = copy_row + i * kRowStep;
                    const int64_t src = off[i] < 0 ? 0 : off[i] + copy_chunk * 8;
                    const uint32_t dst = k_dst + r * Sh::kRowBytes + copy_chunk * 16;
                    cpAsync16(dst, a.k_cache + src, off[i] >= 0);
                    cpAsync16(dst + Sh::kTileBytes, a.v_cache + src, off[i] >= 0);
                }
            }
            cpAsyncCommit();
        };

        float o[HD / 8][4];
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
            o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        }
        float m[2] = {-INFINITY, -INFINITY};
        float l[2] = {0.0f, 0.0f};
        int64_t off[Sh::kKvCopies];
        if (num_tiles > 0) {
            issue_q();
#pragma unroll
            for (int tile = 0; tile < Sh::kStages - 1; ++tile) {
                row_offsets(tile, off);
                issue_kv(tile, tile, off);
            }
            row_offsets(Sh::kStages - 1, off);
        }
        int stage = 0;
        int issue_stage = Sh::kStages - 1;
        for (int j = 0; j < num_tiles; ++j) {
            cpAsyncWait<Sh::kStages - 2>();
            __syncthreads();  // tile j is visible to all; every warp is done with tile j - 1
            issue_kv(j + Sh::kStages - 1, issue_stage, off);
            row_offsets(j + Sh::kStages, off);
            issue_stage = issue_stage + 1 == Sh::kStages ? 0 : issue_stage + 1;

            const uint32_t k_tile = ring + stage * Sh::kStageBytes;
            const uint32_t v_tile = k_tile + Sh::kTileBytes;
            float s[Sh::kN / 2];
#pragma unroll
            for (int i = 0; i < Sh::kN / 2; ++i) {
                s[i] = 0.0f;
            }
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                uint32_t qa[4];
                ldsmX4(qa, q_lane + kk * 32);
#pragma unroll
                for (int np = 0; np < Sh::kN / 16; ++np) {
                    uint32_t b[4];
                    ldsmX4(b, k_tile + np * 16 * Sh::kRowBytes + k_lane + kk * 32);
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s + 8 * np), qa, b[0], b[1]);
                    mmaBf16(*reinterpret_cast<float(*)[4]>(s + 8 * np + 4), qa, b[2], b[3]);
                }
            }
            float alpha[2];
            if (j >= unmasked_tiles) {
                softmaxTile<Sh::kN, true>(s, m, l, alpha, pos, j * Sh::kN, a.scale_log2);
            } else {
                softmaxTile<Sh::kN, false>(s, m, l, alpha, pos, j * Sh::kN, a.scale_log2);
            }
#pragma unroll
            for (int jn = 0; jn < HD / 8; ++jn) {
                o[jn][0] *= alpha[0];
                o[jn][1] *= alpha[0];
                o[jn][2] *= alpha[1];
                o[jn][3] *= alpha[1];
            }
#pragma unroll
            for (int kv = 0; kv < Sh::kN / 16; ++kv) {
                const uint32_t pa[4] = {packBf16(s[8 * kv], s[8 * kv + 1]), packBf16(s[8 * kv + 2], s[8 * kv + 3]),
                                        packBf16(s[8 * kv + 4], s[8 * kv + 5]), packBf16(s[8 * kv + 6], s[8 * kv + 7])};
#pragma unroll
                for (int jj = 0; jj < HD / 16; ++jj) {
                    uint32_t b[4];
                    ldsmX4Trans(b, v_tile + kv * 16 * Sh::kRowBytes + v_lane + jj * 32);
                    mmaBf16(o[2 * jj], pa, b[0], b[1]);
                    mmaBf16(o[2 * jj + 1], pa, b[2], b[3]);
                }
            }
            stage = stage + 1 == Sh::kStages ? 0 : stage + 1;
        }
        cpAsyncWait<0>();

        // Epilogue: o / l in bf16, straight from the fragments (rows past the chunk are not stored).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int f = f0 + 8 * r;
            const float sum = quadSum(l[r]);
            if (f >= it.rows) {
                continue;
            }
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            const int token = f / a.group;
            const int head = it.kvh * a.group + (f - token * a.group);
            uint16_t* dst = a.out + (static_cast<int64_t>(it.q0 + token) * a.num_heads + head) * HD + 2 * t;
#pragma unroll
            for (int jn = 0; jn < HD / 8; ++jn) {
                *reinterpret_cast<uint32_t*>(dst + 8 * jn) = packBf16(o[jn][2 * r] * inv, o[jn][2 * r + 1] * inv);
            }
        }
    }
}

template <int HD>
cudaError_t launchFor(const PagedAttnArgs& a, int sm_count, int64_t item_bound, cudaStream_t stream) {
    using Sh = MmaShape<HD>;
    static std::atomic<uint64_t> configured{0};
    const int smem = Sh::kFixedBytes + (a.num_seqs + 1) * 4;
    const int max_smem = Sh::kFixedBytes + (kPrefillMaxSeqs + 1) * 4;
    cudaError_t err = allowDynamicSmemOnce(pagedPrefillMmaKernel<HD>, max_smem, configured);
    if (err != cudaSuccess) {
        return err;
    }
    static std::atomic<int> ctas_per_sm[64];
    int per_sm = 1;
    err = ctasPerSmOnce(pagedPrefillMmaKernel<HD>, kThreads, max_smem, ctas_per_sm, &per_sm);
    if (err != cudaSuccess) {
        return err;
    }
    const int64_t grid = std::min<int64_t>(item_bound, static_cast<int64_t>(per_sm) * sm_count);
    pagedPrefillMmaKernel<HD><<<static_cast<unsigned>(std::max<int64_t>(grid, 1)), kThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launchPagedPrefillMma(const PagedAttentionCudaParams& p, int sm_count, bool skip_single_rows,
                                  cudaStream_t stream) {
    PagedAttnArgs a = makePagedAttnArgs(p);
    a.skip_single_rows = skip_single_rows ? 1 : 0;
    // Tiles of every chunk: at most one partial tile per chunk beyond the whole ones.
    const int64_t rows = static_cast<int64_t>(p.num_seqs) * p.max_q_len * a.group;
    const int64_t item_bound = (rows / kRows + p.num_seqs) * p.num_kv_heads;
    switch (p.head_dim) {
        case 16:
            return launchFor<16>(a, sm_count, item_bound, stream);
        case 32:
            return launchFor<32>(a, sm_count, item_bound, stream);
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
