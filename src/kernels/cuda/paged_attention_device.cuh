// Device helpers of the paged attention kernels (paged_attention_*.cu): the kernels' argument block, thin wrappers
// over the instructions they use (cp.async, ldmatrix, mma.sync m16n8k16, wgmma fences), the online-softmax step on
// accumulator fragments, and the map from a prefill CTA's work items to (chunk, row tile). Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "kernels/paged_attention_cuda.h"

namespace afd::kernels::cuda::attn {

// What every paged attention kernel reads (PagedAttentionCudaParams, plus values derived on the host).
struct PagedAttnArgs {
    const uint16_t* q;            // [T, num_heads, head_dim]
    const uint16_t* k_cache;      // [num_blocks, block_size, num_kv_heads, head_dim]
    const uint16_t* v_cache;      // [num_blocks, block_size, num_kv_heads, head_dim]
    const int32_t* q_start;       // [num_seqs + 1]
    const int32_t* seq_len;       // [num_seqs]
    const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
    uint16_t* out;                // [T, num_heads, head_dim]
    float* part_o;                // decode splits: [num_seqs, splits, num_heads, head_dim] fp32 (o / l)
    float* part_lse;              // decode splits: [num_seqs, splits, num_heads] fp32 (m + log2 l, log2 domain)
    int num_seqs;
    int num_heads;
    int num_kv_heads;
    int group;  // num_heads / num_kv_heads
    int block_size_log2;
    int max_blocks_per_seq;
    float scale_log2;      // scale * log2(e): scores live in the log2 domain
    int splits;            // decode: partial slots per chunk (DecodeSplitPlan::splits)
    int head_blocks;       // decode: CTAs per KV head (16 query heads each)
    int skip_single_rows;  // prefill: chunks of one query row get no tiles (the decode kernel serves them)
};

// The argument block of a checked call (block_size a power of two).
inline PagedAttnArgs makePagedAttnArgs(const PagedAttentionCudaParams& p) {
    PagedAttnArgs a{};
    a.q = p.q;
    a.k_cache = p.k_cache;
    a.v_cache = p.v_cache;
    a.q_start = p.q_start;
    a.seq_len = p.seq_len;
    a.block_tables = p.block_tables;
    a.out = p.out;
    a.num_seqs = p.num_seqs;
    a.num_heads = p.num_heads;
    a.num_kv_heads = p.num_kv_heads;
    a.group = p.num_heads / p.num_kv_heads;
    a.block_size_log2 = 0;
    while ((1 << a.block_size_log2) < p.block_size) {
        ++a.block_size_log2;
    }
    a.max_blocks_per_seq = p.max_blocks_per_seq;
    a.scale_log2 = p.scale * 1.4426950408889634f;
    return a;
}

// Allows `kernel` `bytes` of dynamic shared memory, once per device (one static mask per kernel): later launches,
// those inside a stream capture included, make no attribute call.
template <class Kernel>
cudaError_t allowDynamicSmemOnce(Kernel kernel, int bytes, std::atomic<uint64_t>& configured_devices) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
        return err;
    }
    const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
    if (bit != 0 && (configured_devices.load(std::memory_order_acquire) & bit) != 0) {
        return cudaSuccess;
    }
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess) {
        configured_devices.fetch_or(bit, std::memory_order_acq_rel);
    }
    return err;
}

// CTAs of `kernel` one SM holds with `threads` threads and `smem` bytes of dynamic shared memory, queried once per
// device (`cache`: one static array per kernel, 0 = not yet asked); devices 64 and up ask on every call.
template <class Kernel>
cudaError_t ctasPerSmOnce(Kernel kernel, int threads, int smem, std::atomic<int> (&cache)[64], int* ctas) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
        return err;
    }
    if (device < 64 && (*ctas = cache[device].load(std::memory_order_acquire)) > 0) {
        return cudaSuccess;
    }
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas, kernel, threads, smem);
    if (err == cudaSuccess) {
        *ctas = *ctas > 0 ? *ctas : 1;
        if (device < 64) {
            cache[device].store(*ctas, std::memory_order_release);
        }
    }
    return err;
}

// A chunk's KV length as the kernels use it: never past its block table row (a caller's bad length cannot send the
// loads outside the table).
__device__ __forceinline__ int clampedSeqLen(const PagedAttnArgs& a, int chunk) {
    const int len = a.seq_len[chunk];
    const int cap = a.max_blocks_per_seq << a.block_size_log2;
    return len < 0 ? 0 : (len > cap ? cap : len);
}

// Element offset of (position `pos`, KV head `kvh`) of a chunk's sequence, or -1 when the position is past `len` or
// its block entry is negative (a row to zero-fill).
__device__ __forceinline__ int64_t kvRowOffset(const PagedAttnArgs& a, int chunk, int pos, int len, int kvh,
                                               int head_dim) {
    if (pos >= len) {
        return -1;
    }
    const int page = a.block_tables[static_cast<int64_t>(chunk) * a.max_blocks_per_seq + (pos >> a.block_size_log2)];
    if (page < 0) {
        return -1;
    }
    const int64_t slot = (static_cast<int64_t>(page) << a.block_size_log2) + (pos & ((1 << a.block_size_log2) - 1));
    return (slot * a.num_kv_heads + kvh) * head_dim;
}

// ---- instructions ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smemAddr(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes global -> shared, L2 only; with `valid` false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid) {
    const uint32_t src_size = valid ? 16u : 0u;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cpAsyncWait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8k … 8k + 7 give the row addresses of matrix k, register k receives it (thread l: row
// l / 4, columns 2 (l % 4) and +1). The .trans form delivers each matrix transposed.
__device__ __forceinline__ void ldsmX4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsmX4Trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a b for one m16n8k16 tile, bf16 operands, fp32 accumulators. Fragments (g = lane / 4, t = lane % 4):
// a[0] (g, 2t..2t+1), a[1] (g + 8, 2t..), a[2] (g, 2t + 8..), a[3] (g + 8, 2t + 8..); b0 (k 2t..2t+1, n g),
// b1 (k 2t + 8.., n g); c[0..1] (g, 2t..2t+1), c[2..3] (g + 8, 2t..2t+1).
__device__ __forceinline__ void mmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to bf16 in one register, `lo` in the low half (the lower column of a fragment pair).
__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^x by the SFU (exact enough for softmax weights; 2^-inf = 0).
__device__ __forceinline__ float fastExp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Orders this thread's generic-proxy writes of shared memory (cp.async landed and waited for) before later
// async-proxy reads (wgmma operands).
__device__ __forceinline__ void fenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmmaWait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving a register's reads or writes across wgmma issue and wait points.
__device__ __forceinline__ void fenceOperand(float& reg) { asm volatile("" : "+f"(reg)::"memory"); }
__device__ __forceinline__ void fenceOperand(uint32_t& reg) { asm volatile("" : "+r"(reg)::"memory"); }

__device__ __forceinline__ void namedBarrierSync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Programmatic dependent launch: wait for the grids this one depends on (a no-op without the launch attribute), and
// let the next grid in the stream start its prologue.
__device__ __forceinline__ void gridDependencyWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void launchDependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// ---- online softmax -------------------------------------------------------------------------------------------

// One KV tile of the online softmax on a 16-row accumulator slab (mma.sync C fragments, and each warp's share of a
// wgmma m64 accumulator): s[4 j + q] holds row g + 8 (q / 2), column 8 j + 2 (lane % 4) + q % 2 of the tile's raw
// scores (q k). On return s holds the weights 2^(s * scale_log2 - m) (0 where masked), m[r] the running maximum of
// row r in the log2 domain, l[r] this thread's share of the running sum (quad-reduce at the end), alpha[r] the
// factor the row's earlier accumulators must be multiplied by. kMasked: column c (KV position col0 + c) is visible
// to row r only while col0 + c <= limit[r]; otherwise every column is visible.
template <int kCols, bool kMasked>
__device__ __forceinline__ void softmaxTile(float (&s)[kCols / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                            const int (&limit)[2], int col0, float scale_log2) {
    const int tcol = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kCols / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& v = s[4 * j + 2 * r + e];
                if constexpr (kMasked) {
                    if (col0 + 8 * j + tcol + e > limit[r]) {
                        v = -INFINITY;
                    }
                }
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * scale_log2);
        // NOTE: a row with nothing visible yet keeps m = -inf; its weights and alpha are 0, never NaN.
        const float base = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = fastExp2(m[r] - base);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kCols / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& v = s[4 * j + 2 * r + e];
                v = fastExp2(fmaf(v, scale_log2, -base));
                sum += v;
            }
        }
        l[r] = l[r] * alpha[r] + sum;
        m[r] = m_new;
    }
}

__device__ __forceinline__ float quadSum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

// ---- prefill work items ---------------------------------------------------------------------------------------

// A prefill kernel's query rows are the (token, head) pairs of a chunk and one KV head, flattened token-major
// (row f = token * group + head-in-group), in tiles of kRows: chunk j has ceil(n_j * group / kRows) tiles. Every CTA
// builds prefix[i] = tiles of the chunks before i (i in [0, S]) in shared memory, with all kThreads threads;
// kPerThread * kThreads >= S. With skip_single_rows a chunk of one query row has no tiles. warp_sums: kThreads / 32
// ints of scratch.
template <int kThreads, int kPerThread>
__device__ void buildTilePrefix(const int32_t* q_start, int num_seqs, int group, int rows_per_tile,
                                bool skip_single_rows, int* prefix, int* warp_sums) {
    const int tid = threadIdx.x;
    const int first = tid * kPerThread;
    int starts[kPerThread + 1];
#pragma unroll
    for (int k = 0; k <= kPerThread; ++k) {
        starts[k] = q_start[min(first + k, num_seqs)];
    }
    int tiles[kPerThread];
    int sum = 0;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int n = max(starts[k + 1] - starts[k], 0);
        const int64_t rows = skip_single_rows && n == 1 ? 0 : static_cast<int64_t>(n) * group;
        tiles[k] = first + k < num_seqs ? static_cast<int>((rows + rows_per_tile - 1) / rows_per_tile) : 0;
        sum += tiles[k];
    }
    const int lane = tid & 31;
    const int warp = tid >> 5;
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        incl += lane >= o ? v : 0;
    }
    if (lane == 31) {
        warp_sums[warp] = incl;
    }
    __syncthreads();
    int offset = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
        offset += w < warp ? warp_sums[w] : 0;
    }
    int run = offset + incl - sum;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        if (first + k < num_seqs) {
            prefix[first + k] = run;
        }
        run += tiles[k];
    }
    if (tid == kThreads - 1) {
        prefix[num_seqs] = run;
    }
    __syncthreads();
}

// The chunk that holds global row tile u < prefix[S]: the largest c < S with prefix[c] <= u (chunks without tiles
// are passed over).
__device__ __forceinline__ int findChunk(const int* prefix, int num_seqs, int u) {
    int lo = 0;
    int hi = num_seqs;
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (prefix[mid] <= u) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// One work item of a prefill CTA: row tile `tile` of chunk `chunk` for KV head `kvh`. Items run heavy first: a
// chunk's last tiles (the longest causal context) before its first ones.
struct PrefillItem {
    int chunk;
    int kvh;
    int row0;  // first flattened row of the tile
    int rows;  // rows of the chunk: n * group
    int q0;    // the chunk's first query row (q_start)
    int n;     // the chunk's query rows
    int len;   // the chunk's KV length (clamped)
};

__device__ __forceinline__ PrefillItem prefillItem(const PagedAttnArgs& a, const int* prefix, int item,
                                                   int rows_per_tile) {
    PrefillItem it;
    const int u = item / a.num_kv_heads;
    it.kvh = item - u * a.num_kv_heads;
    it.chunk = findChunk(prefix, a.num_seqs, u);
    const int tiles = prefix[it.chunk + 1] - prefix[it.chunk];
    const int tile = tiles - 1 - (u - prefix[it.chunk]);
    it.q0 = a.q_start[it.chunk];
    it.n = a.q_start[it.chunk + 1] - it.q0;
    it.rows = it.n * a.group;
    it.row0 = tile * rows_per_tile;
    it.len = clampedSeqLen(a, it.chunk);
    return it;
}

// Position of flattened row f of an item (rows past the chunk's end take the last row's position, so that they
// attend to something and stay finite; they are never stored). Negative: the row attends to nothing.
__device__ __forceinline__ int rowPosition(const PrefillItem& it, int group, int f) {
    const int row = f < it.rows ? f : it.rows - 1;
    return it.len - it.n + row / group;
}

}  // namespace afd::kernels::cuda::attn
