// Building blocks of the sampling kernel (sampling.cu): one CTA of kSampleThreads threads owns one row of logits.
// Passes over the row (unordered visits, ordered prefix searches, radix selection of a threshold), the logits'
// order-preserving keys, and a bitonic sort of candidates in shared memory. Every function is called by all threads
// of the CTA (they synchronise). Included by .cu files only.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace afd::kernels::cuda::sampling {

inline constexpr int kSampleThreads = 512;
inline constexpr int kThreadTop = 4;                             // largest logits a thread keeps in the first pass
inline constexpr int kCandidates = kSampleThreads * kThreadTop;  // 2048: the shared-memory candidate buffer
inline constexpr int kScanItems = 8;                             // consecutive logits per thread in ordered passes
inline constexpr int kBins = 256;                                // radix digit of the selection
inline constexpr uint64_t kNoCandidate = ~uint64_t{0};
inline constexpr int kNoIndex = 0x7fffffff;

struct SharedStorage {
    uint64_t cand[kCandidates];           // candidate keys (candidateKey), sorted ascending = best first
    float prefix[kCandidates];            // inclusive prefix sums of the candidates' probabilities
    unsigned long long hist_mass[kBins];  // 32.32 fixed point (toFixed)
    uint32_t hist_count[kBins];
    float fscratch[32];
    int iscratch[32];
    float best_value[32];
    int best_index[32];
    int count;
    uint32_t sel_bin;
    unsigned long long sel_above;
    unsigned long long sel_tie_mass;
    uint32_t sel_tie_count;
};

// Order-preserving key of a logit: a larger logit has a larger key; -0 is +0; NaN is 0, below every number.
__device__ __forceinline__ uint32_t logitKey(float v) {
    if (v != v) {
        return 0u;
    }
    const uint32_t bits = v == 0.0f ? 0u : __float_as_uint(v);
    return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float keyLogit(uint32_t key) {
    if (key == 0u) {
        return __uint_as_float(0x7fc00000u);
    }
    return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// A logit and its id as one 64-bit key that sorts ascending in the CPU sampler's order: larger logit first, then the
// lower id. Distinct for distinct ids, so "key <= tau" is a prefix of that order.
__device__ __forceinline__ uint64_t candidateKey(float v, int index) {
    return (static_cast<uint64_t>(~logitKey(v)) << 32) | static_cast<uint32_t>(index);
}
__device__ __forceinline__ float candidateLogit(uint64_t c) { return keyLogit(~static_cast<uint32_t>(c >> 32)); }
__device__ __forceinline__ int candidateIndex(uint64_t c) { return static_cast<int>(c & 0xffffffffu); }

// Unnormalised probability exp((l - max) / T) of a logit (0 for NaN and -inf).
__device__ __forceinline__ float probability(float l, float max_logit, float inv_temperature) {
    return l == l ? __expf((l - max_logit) * inv_temperature) : 0.0f;
}

// argmaxCpu's order: a number beats NaN; the larger value wins; on ties (and between NaNs) the lower index.
__device__ __forceinline__ bool betterArgmax(float v, int i, float best_v, int best_i) {
    if (v != v) {
        return best_v != best_v && i < best_i;
    }
    if (best_v != best_v) {
        return true;
    }
    return v > best_v || (v == best_v && i < best_i);
}

// The best (value, index) of the CTA by betterArgmax, returned to every thread.
__device__ __forceinline__ void blockArgmax(float& value, int& index, SharedStorage& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(kFullWarpMask, value, o);
        const int i = __shfl_xor_sync(kFullWarpMask, index, o);
        if (betterArgmax(v, i, value, index)) {
            value = v;
            index = i;
        }
    }
    const int lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) {
        s.best_value[threadIdx.x >> 5] = value;
        s.best_index[threadIdx.x >> 5] = index;
    }
    __syncthreads();
    value = s.best_value[0];
    index = s.best_index[0];
    for (int w = 1; w < kSampleThreads / 32; ++w) {
        if (betterArgmax(s.best_value[w], s.best_index[w], value, index)) {
            value = s.best_value[w];
            index = s.best_index[w];
        }
    }
}

__device__ __forceinline__ int blockMin(int v, SharedStorage& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = min(v, __shfl_xor_sync(kFullWarpMask, v, o));
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        s.iscratch[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    int result = s.iscratch[0];
    for (int w = 1; w < kSampleThreads / 32; ++w) {
        result = min(result, s.iscratch[w]);
    }
    return result;
}

// Calls f(logit, index) for every element of the row, each by one thread; each thread's elements come in increasing
// index order (the threads' interleave). Four loads in flight per thread. vec4: n % 4 == 0, the row 16-byte aligned.
template <class F>
__device__ __forceinline__ void forEachLogit(const float* row, int n, bool vec4, F&& f) {
    constexpr int kUnroll = 4;
    if (vec4) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        const int n4 = n >> 2;
        int i = threadIdx.x;
        for (; i + (kUnroll - 1) * kSampleThreads < n4; i += kUnroll * kSampleThreads) {
            float4 v[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                v[u] = __ldg(row4 + i + u * kSampleThreads);
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int e = 4 * (i + u * kSampleThreads);
                f(v[u].x, e);
                f(v[u].y, e + 1);
                f(v[u].z, e + 2);
                f(v[u].w, e + 3);
            }
        }
        for (; i < n4; i += kSampleThreads) {
            const float4 v = __ldg(row4 + i);
            f(v.x, 4 * i);
            f(v.y, 4 * i + 1);
            f(v.z, 4 * i + 2);
            f(v.w, 4 * i + 3);
        }
        return;
    }
    int i = threadIdx.x;
    for (; i + (kUnroll - 1) * kSampleThreads < n; i += kUnroll * kSampleThreads) {
        float v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            v[u] = __ldg(row + i + u * kSampleThreads);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            f(v[u], i + u * kSampleThreads);
        }
    }
    for (; i < n; i += kSampleThreads) {
        f(__ldg(row + i), i);
    }
}

// Sum over the row of weight(logit, index), returned to every thread.
template <class W>
__device__ __forceinline__ float rowSum(const float* row, int n, bool vec4, W&& weight, SharedStorage& s) {
    float acc = 0.0f;
    forEachLogit(row, n, vec4, [&](float l, int i) { acc += weight(l, i); });
    return blockSum(acc, s.fscratch);
}

// The first index (in id order) with a positive weight at which the running sum of weight(logit, index) over the row
// exceeds target, or kNoIndex. Tiles of kSampleThreads * kScanItems logits, each thread kScanItems consecutive ones.
template <class W>
__device__ int orderedFind(const float* row, int n, bool vec4, float target, W&& weight, SharedStorage& s) {
    float running = 0.0f;
    for (int base = 0; base < n; base += kSampleThreads * kScanItems) {
        const int first = base + static_cast<int>(threadIdx.x) * kScanItems;
        float w[kScanItems];
        if (vec4 && first + kScanItems <= n) {
            const float4 lo = __ldg(reinterpret_cast<const float4*>(row + first));
            const float4 hi = __ldg(reinterpret_cast<const float4*>(row + first + 4));
            const float v[kScanItems] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int j = 0; j < kScanItems; ++j) {
                w[j] = weight(v[j], first + j);
            }
        } else {
#pragma unroll
            for (int j = 0; j < kScanItems; ++j) {
                w[j] = first + j < n ? weight(__ldg(row + first + j), first + j) : 0.0f;
            }
        }
        float local = 0.0f;
#pragma unroll
        for (int j = 0; j < kScanItems; ++j) {
            local += w[j];
        }
        float tile_total = 0.0f;
        float acc = running + blockExclusiveScan(local, s.fscratch, &tile_total);
        int found = kNoIndex;
#pragma unroll
        for (int j = 0; j < kScanItems; ++j) {
            acc += w[j];
            if (found == kNoIndex && w[j] > 0.0f && acc > target) {
                found = first + j;
            }
        }
        found = blockMin(found, s);
        if (found != kNoIndex) {
            return found;
        }
        running += tile_total;
    }
    return kNoIndex;
}

// The result of a selection: the largest key `key` such that the weight of the members with a key >= `key` reaches
// the target (or the lowest member key when no key does); `above` is the weight of the members with a larger key,
// tie_weight and tie_count the weight and number of the members with exactly this key.
struct Selection {
    uint32_t key;
    float above;
    float tie_weight;
    uint32_t tie_count;
};

// Weights in [0, 1] are summed in 32.32 fixed point: integer atomics make the sums, and so the thresholds, the same on
// every run whatever the order of the additions (at most 2^30 logits a row).
inline constexpr double kFixedOne = 4294967296.0;
__device__ __forceinline__ unsigned long long toFixed(float w) {
    return static_cast<unsigned long long>(static_cast<double>(w) * kFixedOne + 0.5);
}
__device__ __forceinline__ float fromFixed(unsigned long long f) {
    return static_cast<float>(static_cast<double>(f) / kFixedOne);
}

// Radix selection over the logits' keys, 8 bits a pass (four passes over the row): member(key, index) says which
// elements take part, weight(logit) in [0, 1] what each counts (1 for a count, a probability for a mass).
template <class Member, class W>
__device__ Selection radixSelect(const float* row, int n, bool vec4, float target, Member&& member, W&& weight,
                                 SharedStorage& s) {
    uint32_t prefix = 0;
    unsigned long long above = 0;
    const unsigned long long target_fixed =
        static_cast<unsigned long long>(static_cast<double>(fmaxf(target, 0.0f)) * kFixedOne + 0.5);
    const int lane = threadIdx.x & 31;
    for (int shift = 24; shift >= 0; shift -= 8) {
        const uint32_t high_mask = shift == 24 ? 0u : (~0u << (shift + 8));
        for (int b = threadIdx.x; b < kBins; b += kSampleThreads) {
            s.hist_mass[b] = 0ull;
            s.hist_count[b] = 0u;
        }
        __syncthreads();
        forEachLogit(row, n, vec4, [&](float l, int i) {
            const uint32_t key = logitKey(l);
            if ((key & high_mask) == prefix && member(key, i)) {
                const uint32_t bin = (key >> shift) & 0xffu;
                atomicAdd(&s.hist_count[bin], 1u);
                const unsigned long long w = toFixed(weight(l));
                if (w != 0ull) {
                    atomicAdd(&s.hist_mass[bin], w);
                }
            }
        });
        __syncthreads();
        if (threadIdx.x < 32) {
            // Lane l holds bins 255 - 8 l - j, j = 0 .. 7: the warp reads the bins from the largest key down.
            unsigned long long lane_mass = 0ull;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                lane_mass += s.hist_mass[kBins - 1 - 8 * lane - j];
            }
            unsigned long long acc = above + warpInclusiveScan(lane_mass) - lane_mass;
            int cross = -1;
            unsigned long long cross_above = 0ull;
            int lowest = -1;
            unsigned long long lowest_above = 0ull;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int b = kBins - 1 - 8 * lane - j;
                const unsigned long long before = acc;
                acc += s.hist_mass[b];
                if (s.hist_count[b] > 0u) {
                    if (cross < 0 && acc >= target_fixed) {
                        cross = b;
                        cross_above = before;
                    }
                    lowest = b;
                    lowest_above = before;
                }
            }
            const unsigned crossed = __ballot_sync(kFullWarpMask, cross >= 0);
            const unsigned nonempty = __ballot_sync(kFullWarpMask, lowest >= 0);
            int bin = 0;
            unsigned long long bin_above = above;
            if (crossed != 0u) {
                const int src = __ffs(crossed) - 1;
                bin = __shfl_sync(kFullWarpMask, cross, src);
                bin_above = __shfl_sync(kFullWarpMask, cross_above, src);
            } else if (nonempty != 0u) {
                const int src = 31 - __clz(nonempty);
                bin = __shfl_sync(kFullWarpMask, lowest, src);
                bin_above = __shfl_sync(kFullWarpMask, lowest_above, src);
            }
            if (lane == 0) {
                s.sel_bin = static_cast<uint32_t>(bin);
                s.sel_above = bin_above;
                s.sel_tie_mass = s.hist_mass[bin];
                s.sel_tie_count = s.hist_count[bin];
            }
        }
        __syncthreads();
        prefix |= s.sel_bin << shift;
        above = s.sel_above;
    }
    return Selection{prefix, fromFixed(above), fromFixed(s.sel_tie_mass), s.sel_tie_count};
}

// Sorts s.cand[0, n) ascending; n a power of two <= kCandidates.
__device__ __forceinline__ void bitonicSort(SharedStorage& s, int n) {
    __syncthreads();
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int c = threadIdx.x; c < n / 2; c += kSampleThreads) {
                const int lo = 2 * stride * (c / stride) + (c % stride);
                const int hi = lo + stride;
                const uint64_t a = s.cand[lo];
                const uint64_t b = s.cand[hi];
                const bool ascending = (lo & size) == 0;
                if ((a > b) == ascending) {
                    s.cand[lo] = b;
                    s.cand[hi] = a;
                }
            }
            __syncthreads();
        }
    }
}

}  // namespace afd::kernels::cuda::sampling
