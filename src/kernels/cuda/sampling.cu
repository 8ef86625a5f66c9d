// Token selection (sampling_cuda.h), one CTA of kSampleThreads threads per row of logits.
//
// Pass 1 finds the argmax (argmaxCpu's order) and, for sampled rows, each thread's kThreadTop best candidates (by
// the CPU sampler's order: larger logit, then lower id) and, where the candidates are every logit, the softmax sum
// (online: a running maximum and a rescaled sum per thread). Then, per row:
//   greedy (or top_k 1, or a maximum that is not finite)  -> the argmax
//   temperature alone                                     -> one ordered pass draws from the whole row
//   top_k <= kFastTopK, or top-p alone                    -> the per-thread candidates, sorted, bound the threshold:
//       with top-k, the k-th best of them (at least k logits are as good); with top-p, the first whose running
//       probability reaches top_p of the sum (the logits as good hold at least that much). A second pass collects
//       every logit as good as the bound; when they fit kCandidates they are sorted and the top-k, the nucleus and
//       the draw are done in shared memory in the CPU sampler's order.
//   anything else (top_k above kFastTopK, a bound that collects too many) -> sampleByRadixSelect: exact thresholds
//       by radix selection (count for top-k, probability mass for top-p), then one ordered pass draws.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/dense_stages.h"
#include "kernels/cuda/sampling_select.cuh"

namespace afd::kernels::cuda {
namespace {

using namespace sampling;

constexpr int kFastTopK = 1024;

struct SampleArgs {
    const float* logits;
    const float* temperature;
    const int32_t* top_k;
    const float* top_p;
    const uint64_t* seed;
    const uint64_t* offset;
    int32_t* out_ids;
    int vocab;
    bool vec4;
};

// What pass 1 gathers besides the argmax.
enum class Pass1 { kArgmax, kTopK, kTopP, kTemperature };

struct RowStats {
    float max_logit;
    int argmax;
    float total;  // softmax sum over the row (kTopP, kTemperature)
};

__device__ __forceinline__ void insertCandidate(uint64_t (&top)[kThreadTop], uint64_t c) {
    if (c >= top[kThreadTop - 1]) {
        return;
    }
    int j = kThreadTop - 1;
#pragma unroll
    for (int q = kThreadTop - 1; q > 0; --q) {
        if (j == q && c < top[q - 1]) {
            top[q] = top[q - 1];
            j = q - 1;
        }
    }
#pragma unroll
    for (int q = 0; q < kThreadTop; ++q) {
        if (q == j) {
            top[q] = c;
        }
    }
}

// Pass 1. With kTopK / kTopP the thread's candidates go to s.cand[kThreadTop * tid ...] (unsorted).
// NOTE: forEachLogit gives each thread its logits in increasing index order, so a later logit equal to a kept one is
// the worse of the two (ties go to the lower id) and the strict comparisons below are exact.
template <Pass1 kPass>
__device__ RowStats firstPass(const float* row, int n, bool vec4, float inv_t, SharedStorage& s) {
    constexpr bool kCandidatesKept = kPass == Pass1::kTopK || kPass == Pass1::kTopP;
    constexpr bool kSum = kPass == Pass1::kTopP || kPass == Pass1::kTemperature;
    float best_v = -INFINITY;  // the thread's first largest number (NaN never wins)
    int best_i = kNoIndex;
    uint64_t top[kThreadTop];
#pragma unroll
    for (int q = 0; q < kThreadTop; ++q) {
        top[q] = kNoCandidate;
    }
    float worst_kept = __uint_as_float(0x7fc00000u);  // logit of top[kThreadTop - 1]; NaN: an empty or NaN slot
    float run_max = -INFINITY;
    float run_sum = 0.0f;
    forEachLogit(row, n, vec4, [&](float l, int i) {
        if (l > best_v || (l == best_v && best_i == kNoIndex)) {
            best_v = l;
            best_i = i;
        }
        if constexpr (kCandidatesKept) {
            if (l > worst_kept || worst_kept != worst_kept) {
                insertCandidate(top, candidateKey(l, i));
                worst_kept = candidateLogit(top[kThreadTop - 1]);
            }
        }
        if constexpr (kSum) {
            if (l > run_max) {
                run_sum = run_sum * __expf((run_max - l) * inv_t) + 1.0f;
                run_max = l;
            } else if (l > -INFINITY) {
                run_sum += __expf((l - run_max) * inv_t);
            }
        }
    });
    if constexpr (kCandidatesKept) {
#pragma unroll
        for (int q = 0; q < kThreadTop; ++q) {
            s.cand[kThreadTop * threadIdx.x + q] = top[q];
        }
    }
    RowStats stats;
    blockArgmax(best_v, best_i, s);
    stats.max_logit = best_v;
    stats.argmax = best_i == kNoIndex ? 0 : best_i;  // every logit NaN: argmaxCpu's 0
    stats.total = 0.0f;
    if constexpr (kSum) {
        const float mine = run_sum > 0.0f ? run_sum * __expf((run_max - best_v) * inv_t) : 0.0f;
        stats.total = blockSum(mine, s.fscratch);
    }
    return stats;
}

// Exact selection by radix passes over the row, for the rows the candidate bound does not settle. k: 0 (off) or in
// [2, n); total: the softmax sum over the row when k is off.
__device__ int sampleByRadixSelect(const float* row, int n, bool vec4, const RowStats& stats, float inv_t, int k,
                                   float top_p, double u, SharedStorage& s) {
    const float m = stats.max_logit;
    auto prob = [=](float l) { return probability(l, m, inv_t); };
    // The top-k candidates: keys above thr_k, and the ties at thr_k up to index idlim_k.
    uint32_t thr_k = 0;
    int idlim_k = kNoIndex;
    float total_k = stats.total;
    if (k > 0) {
        const Selection a = radixSelect(
            row, n, vec4, static_cast<float>(k), [](uint32_t, int) { return true; }, [](float) { return 1.0f; }, s);
        thr_k = a.key;
        const int need = k - static_cast<int>(a.above + 0.5f);
        if (need < static_cast<int>(a.tie_count)) {
            idlim_k = orderedFind(
                row, n, vec4, static_cast<float>(need) - 0.5f,
                [=](float l, int) { return logitKey(l) == thr_k ? 1.0f : 0.0f; }, s);
        }
    }
    auto in_k = [=](uint32_t key, int i) { return key > thr_k || (key == thr_k && i <= idlim_k); };
    if (k > 0) {
        total_k = rowSum(
            row, n, vec4, [&](float l, int i) { return in_k(logitKey(l), i) ? prob(l) : 0.0f; }, s);
    }
    // The nucleus: keys above thr_s, and the ties at thr_s up to index idlim_s (all within the top-k).
    uint32_t thr_s = thr_k;
    int idlim_s = idlim_k;
    float mass_s = total_k;
    if (top_p < 1.0f) {
        const float target = top_p * total_k;
        const Selection b = radixSelect(row, n, vec4, target, in_k, prob, s);
        thr_s = b.key;
        const int ties = static_cast<int>(b.tie_count);
        int need = ties;
        if (b.tie_weight > 0.0f) {
            const float each = b.tie_weight / static_cast<float>(ties);
            need = static_cast<int>(ceilf((target - b.above) / each));
            need = max(1, min(ties, need));
        }
        if (need < ties) {
            idlim_s = orderedFind(
                row, n, vec4, static_cast<float>(need) - 0.5f,
                [=](float l, int i) {
                    const uint32_t key = logitKey(l);
                    return key == thr_s && in_k(key, i) ? 1.0f : 0.0f;
                },
                s);
        } else {
            idlim_s = thr_s == thr_k ? idlim_k : kNoIndex;
        }
    }
    auto in_s = [=](uint32_t key, int i) { return key > thr_s || (key == thr_s && i <= idlim_s); };
    if (top_p < 1.0f) {
        mass_s = rowSum(
            row, n, vec4, [&](float l, int i) { return in_s(logitKey(l), i) ? prob(l) : 0.0f; }, s);
    }
    const int pick = orderedFind(
        row, n, vec4, static_cast<float>(u * mass_s),
        [&](float l, int i) { return in_s(logitKey(l), i) ? prob(l) : 0.0f; }, s);
    return pick == kNoIndex ? stats.argmax : pick;
}

// The draw among the sorted candidates s.cand (the best first): the first `keep` are the top-k (all of them when top-k
// is off); the nucleus is their smallest prefix whose probability reaches top_p * total (total: their sum with top-k,
// else the row's sum).
__device__ int drawFromSorted(int keep, bool top_k_on, float top_p, float row_total, float max_logit, float inv_t,
                              double u, SharedStorage& s) {
    float p[kThreadTop];
    float local = 0.0f;
#pragma unroll
    for (int q = 0; q < kThreadTop; ++q) {
        const int i = kThreadTop * threadIdx.x + q;
        p[q] = i < keep ? probability(candidateLogit(s.cand[i]), max_logit, inv_t) : 0.0f;
        local += p[q];
    }
    float sum = 0.0f;
    float acc = blockExclusiveScan(local, s.fscratch, &sum);
#pragma unroll
    for (int q = 0; q < kThreadTop; ++q) {
        acc += p[q];
        s.prefix[kThreadTop * threadIdx.x + q] = acc;
    }
    __syncthreads();
    const float total = top_k_on ? s.prefix[keep - 1] : row_total;
    int cut = keep;
    if (top_p < 1.0f) {
        const float target = top_p * total;
        int first = kNoIndex;
#pragma unroll
        for (int q = 0; q < kThreadTop; ++q) {
            const int i = kThreadTop * threadIdx.x + q;
            if (first == kNoIndex && i < keep && s.prefix[i] >= target) {
                first = i;
            }
        }
        first = blockMin(first, s);
        cut = first == kNoIndex ? keep : first + 1;
    }
    const float draw = static_cast<float>(u * static_cast<double>(s.prefix[cut - 1]));
    int pick = kNoIndex;
#pragma unroll
    for (int q = 0; q < kThreadTop; ++q) {
        const int i = kThreadTop * threadIdx.x + q;
        if (pick == kNoIndex && i < cut && s.prefix[i] > draw) {
            pick = i;
        }
    }
    pick = blockMin(pick, s);
    return candidateIndex(s.cand[pick == kNoIndex ? cut - 1 : pick]);
}

// Collects every logit whose candidate key is <= tau into s.cand and sorts them; false when more than kCandidates.
__device__ bool collectAndSort(const float* row, int n, bool vec4, uint64_t tau, int* n_collected, SharedStorage& s) {
    __syncthreads();  // everyone has read tau and the previous candidates
    if (threadIdx.x == 0) {
        s.count = 0;
    }
    __syncthreads();
    forEachLogit(row, n, vec4, [&](float l, int i) {
        const uint64_t c = candidateKey(l, i);
        if (c <= tau) {
            const int at = atomicAdd(&s.count, 1);
            if (at < kCandidates) {
                s.cand[at] = c;
            }
        }
    });
    __syncthreads();
    const int count = s.count;
    *n_collected = count;
    if (count > kCandidates) {
        return false;
    }
    int size = 1;
    while (size < count) {
        size <<= 1;
    }
    for (int i = count + static_cast<int>(threadIdx.x); i < size; i += kSampleThreads) {
        s.cand[i] = kNoCandidate;
    }
    bitonicSort(s, size);
    return true;
}

__global__ void __launch_bounds__(kSampleThreads) sampleKernel(SampleArgs a) {
    __shared__ SharedStorage s;
    const int r = blockIdx.x;
    const int n = a.vocab;
    const float* row = a.logits + static_cast<int64_t>(r) * n;
    const float temperature = a.temperature != nullptr ? a.temperature[r] : 0.0f;
    int k = a.top_k != nullptr ? a.top_k[r] : 0;
    if (k < 0 || k >= n) {
        k = 0;  // every logit is a candidate
    }
    const float top_p = a.top_p != nullptr ? a.top_p[r] : 1.0f;
    const bool nucleus = top_p < 1.0f;
    const float inv_t = 1.0f / temperature;
    if (!(temperature > 0.0f) || !(inv_t < INFINITY) || k == 1) {
        const RowStats stats = firstPass<Pass1::kArgmax>(row, n, a.vec4, 0.0f, s);
        if (threadIdx.x == 0) {
            a.out_ids[r] = stats.argmax;
        }
        return;
    }
    const double u = samplingUniform(a.seed != nullptr ? a.seed[r] : 0, a.offset != nullptr ? a.offset[r] : 0);
    RowStats stats;
    if (k > 0) {
        stats = firstPass<Pass1::kTopK>(row, n, a.vec4, inv_t, s);
    } else if (nucleus) {
        stats = firstPass<Pass1::kTopP>(row, n, a.vec4, inv_t, s);
    } else {
        stats = firstPass<Pass1::kTemperature>(row, n, a.vec4, inv_t, s);
    }
    int id = stats.argmax;
    if (!isfinite(stats.max_logit)) {
        // No finite maximum: every logit is NaN or -inf, or +inf ones take all the probability; the first of them.
    } else if (k == 0 && !nucleus) {
        const float m = stats.max_logit;
        const int pick = orderedFind(
            row, n, a.vec4, static_cast<float>(u * stats.total), [=](float l, int) { return probability(l, m, inv_t); },
            s);
        id = pick == kNoIndex ? stats.argmax : pick;
    } else {
        // The candidate bound from the per-thread candidates (s.cand, kCandidates of them with padding).
        bitonicSort(s, kCandidates);
        uint64_t tau = kNoCandidate;
        if (k > 0) {
            if (k <= kFastTopK) {
                tau = s.cand[k - 1];
            }
        } else {
            float p[kThreadTop];
            float local = 0.0f;
#pragma unroll
            for (int q = 0; q < kThreadTop; ++q) {
                p[q] = probability(candidateLogit(s.cand[kThreadTop * threadIdx.x + q]), stats.max_logit, inv_t);
                local += p[q];
            }
            float sum = 0.0f;
            float acc = blockExclusiveScan(local, s.fscratch, &sum);
            const float target = top_p * stats.total;
            int first = kNoIndex;
#pragma unroll
            for (int q = 0; q < kThreadTop; ++q) {
                acc += p[q];
                if (first == kNoIndex && acc >= target) {
                    first = kThreadTop * threadIdx.x + q;
                }
            }
            first = blockMin(first, s);
            if (first != kNoIndex) {
                tau = s.cand[first];
            }
        }
        int collected = 0;
        if (tau != kNoCandidate && collectAndSort(row, n, a.vec4, tau, &collected, s)) {
            const int keep = k > 0 ? k : collected;
            id = drawFromSorted(keep, k > 0, top_p, stats.total, stats.max_logit, inv_t, u, s);
        } else {
            id = sampleByRadixSelect(row, n, a.vec4, stats, inv_t, k, top_p, u, s);
        }
    }
    if (threadIdx.x == 0) {
        a.out_ids[r] = id;
    }
}

}  // namespace

cudaError_t enqueueSampleTokens(const SampleTokensParams& p, cudaStream_t stream) {
    SampleArgs a;
    a.logits = p.logits;
    a.temperature = p.temperature;
    a.top_k = p.temperature != nullptr ? p.top_k : nullptr;
    a.top_p = p.temperature != nullptr ? p.top_p : nullptr;
    a.seed = p.temperature != nullptr ? p.seed : nullptr;
    a.offset = p.temperature != nullptr ? p.offset : nullptr;
    a.out_ids = p.out_ids;
    a.vocab = static_cast<int>(p.vocab_size);
    a.vec4 = p.vocab_size % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
    sampleKernel<<<static_cast<unsigned>(p.num_rows), kSampleThreads, 0, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace afd::kernels::cuda
