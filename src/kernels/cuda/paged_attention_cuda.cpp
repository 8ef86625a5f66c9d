// Host side of the paged attention (kernels/paged_attention_cuda.h): argument checks, the decode split plan, the
// workspace bound and the choice of kernel.
#include "kernels/paged_attention_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention_launch.h"

namespace afd::kernels {
namespace cuda {
namespace {

// The combine kernel keeps one weight per split in shared memory: at most kMaxSeqLen / kDecodeMaxSplitTokens floats.
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
constexpr int64_t kMaxGridYz = 65535;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool isPowerOfTwoIn(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Partial rows of a call with these bounds: every chunk's splits at the bound.
int64_t partialRowsBound(int num_seqs, int max_seq_len) {
    return static_cast<int64_t>(num_seqs) * decodeSplits(std::max(max_seq_len, 1));
}

int smCount() {
    static std::atomic<int> cache[64];
    int device = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 64) {
        const int cached = cache[device].load(std::memory_order_acquire);
        if (cached > 0) {
            return cached;
        }
    }
    int count = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device < 64) {
        cache[device].store(count, std::memory_order_release);
    }
    return count;
}

void checkParams(const PagedAttentionCudaParams& p) {
    AFD_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
              "pagedAttentionCuda: num_heads {} must be a positive multiple of num_kv_heads {}", p.num_heads,
              p.num_kv_heads);
    AFD_CHECK(p.head_dim == 16 || p.head_dim == 32 || p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256,
              "pagedAttentionCuda: head_dim {} is not one of 16, 32, 64, 128, 256", p.head_dim);
    AFD_CHECK(isPowerOfTwoIn(p.block_size, 16, 128), "pagedAttentionCuda: block_size {} is not one of 16, 32, 64, 128",
              p.block_size);
    AFD_CHECK(std::isfinite(p.scale) && p.scale > 0.0f, "pagedAttentionCuda: scale {} must be positive and finite",
              p.scale);
    AFD_CHECK(p.q != nullptr, "pagedAttentionCuda: q is null");
    AFD_CHECK(p.k_cache != nullptr, "pagedAttentionCuda: k_cache is null");
    AFD_CHECK(p.v_cache != nullptr, "pagedAttentionCuda: v_cache is null");
    AFD_CHECK(p.q_start != nullptr, "pagedAttentionCuda: q_start is null");
    AFD_CHECK(p.seq_len != nullptr, "pagedAttentionCuda: seq_len is null");
    AFD_CHECK(p.block_tables != nullptr, "pagedAttentionCuda: block_tables is null");
    AFD_CHECK(p.out != nullptr, "pagedAttentionCuda: out is null");
    AFD_CHECK(aligned16(p.q) && aligned16(p.k_cache) && aligned16(p.v_cache) && aligned16(p.out),
              "pagedAttentionCuda: q, k_cache, v_cache and out must be 16-byte aligned");
    AFD_CHECK(p.max_blocks_per_seq > 0, "pagedAttentionCuda: max_blocks_per_seq {} must be positive",
              p.max_blocks_per_seq);
    AFD_CHECK(p.max_q_len >= 1, "pagedAttentionCuda: max_q_len {} must be at least 1", p.max_q_len);
    AFD_CHECK(p.max_seq_len >= 0 && p.max_seq_len <= kMaxSeqLen, "pagedAttentionCuda: max_seq_len {} outside [0, {}]",
              p.max_seq_len, kMaxSeqLen);
    AFD_CHECK(static_cast<int64_t>(p.max_seq_len) <= static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size,
              "pagedAttentionCuda: max_seq_len {} exceeds max_blocks_per_seq {} * block_size {}", p.max_seq_len,
              p.max_blocks_per_seq, p.block_size);
}

}  // namespace

DecodeSplitPlan decodeSplitPlan(int64_t units, int max_seq_len) {
    DecodeSplitPlan plan;
    plan.splits = decodeSplits(std::max(max_seq_len, 1));
    const int64_t want = std::max<int64_t>(1, kDecodeTargetCtas / std::max<int64_t>(units, 1));
    plan.grid = static_cast<int>(std::min<int64_t>(want, plan.splits));
    return plan;
}

size_t decodePartialBytes(int num_seqs, int splits, int num_heads, int head_dim) {
    if (splits <= 1) {
        return 0;
    }
    return static_cast<size_t>(num_seqs) * splits * num_heads * (head_dim + 1) * sizeof(float);
}

void pagedAttentionCudaWith(const PagedAttentionCudaParams& p, PagedPrefillKernel prefill, void* stream) {
    AFD_CHECK(p.num_seqs >= 0, "pagedAttentionCuda: num_seqs {} < 0", p.num_seqs);
    checkParams(p);
    if (p.num_seqs == 0) {
        return;
    }
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int group = p.num_heads / p.num_kv_heads;
    if (p.max_q_len > 1) {
        AFD_CHECK(p.num_seqs <= kPrefillMaxSeqs, "pagedAttentionCuda: num_seqs {} above the prefill kernel's {}",
                  p.num_seqs, kPrefillMaxSeqs);
    }
    // The chunks of one query row (every chunk of a decode-only call, the decode rows of a mixed one) go through the
    // decode kernel, so a row's numbers do not depend on what else the step holds; the prefill kernel skips them.
    {
        const int64_t head_blocks = ceilDiv(group, kDecodeHeadsPerCta);
        AFD_CHECK(p.num_seqs <= kMaxGridYz, "pagedAttentionCuda: num_seqs {} above the decode kernel's {}", p.num_seqs,
                  kMaxGridYz);
        AFD_CHECK(p.num_kv_heads * head_blocks <= kMaxGridYz,
                  "pagedAttentionCuda: num_kv_heads {} too large for the decode grid", p.num_kv_heads);
        const DecodeSplitPlan plan = decodeSplitPlan(p.num_seqs * p.num_kv_heads * head_blocks, p.max_seq_len);
        const size_t needed = decodePartialBytes(p.num_seqs, plan.splits, p.num_heads, p.head_dim);
        if (needed > 0) {
            AFD_CHECK(p.workspace != nullptr && p.workspace_bytes >= needed,
                      "pagedAttentionCuda: workspace of {} bytes is too small: this call needs {} "
                      "(pagedAttentionWorkspaceBytes gives {})",
                      p.workspace_bytes, needed,
                      pagedAttentionWorkspaceBytes(p.num_seqs, p.max_q_len, p.num_heads, p.head_dim, p.max_seq_len));
            AFD_CHECK(aligned16(p.workspace), "pagedAttentionCuda: workspace must be 16-byte aligned");
        }
        AFD_CUDA_CHECK(launchPagedDecode(p, plan, s));
        if (p.max_q_len == 1) {
            return;
        }
    }
    const int64_t rows = static_cast<int64_t>(p.num_seqs) * p.max_q_len * group;
    AFD_CHECK((rows / 64 + p.num_seqs) * p.num_kv_heads < (int64_t{1} << 31),
              "pagedAttentionCuda: num_seqs {} x max_q_len {} x num_heads {} is too many query rows", p.num_seqs,
              p.max_q_len, p.num_heads);
    bool wgmma = pagedPrefillWgmmaSupports(p.head_dim);
    if (prefill == PagedPrefillKernel::kMma) {
        wgmma = false;
    } else if (prefill == PagedPrefillKernel::kWgmma) {
        AFD_CHECK(wgmma, "pagedAttentionCuda: the wgmma prefill kernel has no head_dim {}", p.head_dim);
    }
    const int sm_count = smCount();
    AFD_CUDA_CHECK(wgmma ? launchPagedPrefillWgmma(p, sm_count, /*skip_single_rows=*/true, s)
                         : launchPagedPrefillMma(p, sm_count, /*skip_single_rows=*/true, s));
}

}  // namespace cuda

size_t pagedAttentionWorkspaceBytes(int num_seqs, int max_q_len, int num_heads, int head_dim, int max_seq_len) {
    // NOTE: independent of max_q_len (only decode calls use it), so one workspace serves every step of a batch size.
    (void)max_q_len;
    if (num_seqs <= 0 || num_heads <= 0 || head_dim <= 0) {
        return 0;
    }
    return static_cast<size_t>(cuda::partialRowsBound(num_seqs, max_seq_len)) * num_heads * (head_dim + 1) *
           sizeof(float);
}

void pagedAttentionCuda(const PagedAttentionCudaParams& params, void* stream) {
    cuda::pagedAttentionCudaWith(params, cuda::PagedPrefillKernel::kAuto, stream);
}

}  // namespace afd::kernels
