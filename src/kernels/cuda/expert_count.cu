// The per-expert routing counters (kernels/expert_count_cuda.h): each block tallies its share of the routing entries
// per expert in shared memory, then adds its non-zero tallies to the 64-bit totals with one global atomic each; and
// the snapshot copy that reads each total as one 64-bit load.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/expert_count_launch.h"

namespace afd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kEntriesPerBlock = kThreads * 4;  // a decode step's few entries take one block
constexpr int64_t kMaxBlocks = 256;

__global__ void __launch_bounds__(kThreads)
    countExpertTokensKernel(const int32_t* __restrict__ num_valid, const int32_t* __restrict__ topk_ids,
                            int64_t num_rows, int64_t top_k, int32_t num_experts, unsigned long long* counts) {
    extern __shared__ uint32_t tally[];  // [num_experts]
    for (int32_t e = threadIdx.x; e < num_experts; e += kThreads) {
        tally[e] = 0;
    }
    __syncthreads();
    const int64_t rows = num_valid == nullptr ? num_rows : min(max(int64_t{*num_valid}, int64_t{0}), num_rows);
    const int64_t entries = rows * top_k;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < entries; i += stride) {
        const int32_t id = topk_ids[i];
        if (id >= 0 && id < num_experts) {
            atomicAdd(&tally[id], 1u);
        }
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e < num_experts; e += kThreads) {
        if (tally[e] != 0) {
            atomicAdd(&counts[e], static_cast<unsigned long long>(tally[e]));
        }
    }
}

__global__ void __launch_bounds__(kThreads)
    snapshotCountersKernel(const unsigned long long* counts, unsigned long long* __restrict__ snapshot,
                           int64_t num_counters) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    if (i < num_counters) {
        // A volatile aligned 64-bit load: one access, never a torn value while other streams' atomics add.
        snapshot[i] = *reinterpret_cast<const volatile unsigned long long*>(counts + i);
    }
}

}  // namespace

cudaError_t launchCountExpertTokens(const ExpertTokenCountParams& p, cudaStream_t stream) {
    const int64_t blocks =
        std::clamp<int64_t>((p.num_rows * p.top_k + kEntriesPerBlock - 1) / kEntriesPerBlock, 1, kMaxBlocks);
    const size_t shared = static_cast<size_t>(p.num_experts) * sizeof(uint32_t);
    countExpertTokensKernel<<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(
        p.num_valid, p.topk_ids, p.num_rows, p.top_k, static_cast<int32_t>(p.num_experts),
        reinterpret_cast<unsigned long long*>(p.counts));
    return cudaGetLastError();
}

cudaError_t launchSnapshotCounters(const uint64_t* counts, uint64_t* snapshot, int64_t num_counters,
                                   cudaStream_t stream) {
    const auto blocks = static_cast<unsigned>((num_counters + kThreads - 1) / kThreads);
    snapshotCountersKernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const unsigned long long*>(counts),
                                                            reinterpret_cast<unsigned long long*>(snapshot),
                                                            num_counters);
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
