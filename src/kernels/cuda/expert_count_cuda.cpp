// Host side of the per-expert routing counters (kernels/expert_count_cuda.h): checks the params, then launches
// expert_count.cu's kernels on the caller's stream.
#include "kernels/expert_count_cuda.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/expert_count_launch.h"

namespace afd::kernels {

void countExpertTokensCuda(const ExpertTokenCountParams& p, void* stream) {
    AFD_CHECK(p.num_rows >= 0 && p.top_k > 0, "countExpertTokensCuda: num_rows {} < 0 or top_k {} < 1", p.num_rows,
              p.top_k);
    AFD_CHECK(p.num_experts >= 1 && p.num_experts <= kMaxCountedExperts,
              "countExpertTokensCuda: num_experts {} outside [1, {}]", p.num_experts, kMaxCountedExperts);
    AFD_CHECK(p.num_rows * p.top_k < (int64_t{1} << 31), "countExpertTokensCuda: {} rows x top_k {} pass 2^31 entries",
              p.num_rows, p.top_k);
    if (p.num_rows == 0) {
        return;
    }
    AFD_CHECK(p.topk_ids != nullptr && p.counts != nullptr,
              "countExpertTokensCuda: topk_ids and counts must not be null");
    AFD_CUDA_CHECK(cuda::launchCountExpertTokens(p, static_cast<cudaStream_t>(stream)));
}

void snapshotCountersCuda(const uint64_t* counts, uint64_t* snapshot, int64_t num_counters, void* stream) {
    AFD_CHECK(num_counters >= 0, "snapshotCountersCuda: num_counters {} < 0", num_counters);
    if (num_counters == 0) {
        return;
    }
    AFD_CHECK(counts != nullptr && snapshot != nullptr, "snapshotCountersCuda: counts and snapshot must not be null");
    AFD_CUDA_CHECK(cuda::launchSnapshotCounters(counts, snapshot, num_counters, static_cast<cudaStream_t>(stream)));
}

}  // namespace afd::kernels
