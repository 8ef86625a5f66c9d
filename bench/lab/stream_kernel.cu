// The read-stream kernel of `afd bench stream` (stream_bench.h): one CTA per SM reads its own regions through the
// paths its mode names, and stamps when each path ends.
//
// CTA = 256 threads: thread 0 issues the TMA bulk copies into a ring of stages, warp 1's lane 0 takes each stage as it
// lands and hands it back (nothing reads the data), warps 4-7 read by 16-byte loads, kLoads in flight per thread, and
// fold what they read into one word (so the loads are not dead); or warps 5-7 or 4-7 fill the DRAM part of each stage
// instead of the TMA (StreamKernelArgs::stage_load_threads). The launch asks for at least 120 KB of shared memory,
// so that one CTA runs per SM.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/sm90_ptx.cuh"
#include "lab/stream_kernel.h"

namespace afd::lab {
namespace {

namespace sm90 = kernels::cuda::sm90;

// Device-wide nanosecond clock (the same on every SM): the CTAs' stamps.
__device__ __forceinline__ uint64_t globalTimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

constexpr int kLoadThreads = 128;
constexpr size_t kOneCtaPerSmBytes = 120 * 1024;  // more than half an SM's shared memory
constexpr int kLoads = 8;                         // 16-byte loads in flight per loading thread (16 KB per CTA)

// An L2 policy for a read, or none (the read's hint-less form).
struct ReadHint {
    bool on;
    uint64_t policy;
};
// The hints of the DRAM bytes and of the L2-resident ones (StreamKernelArgs::policy).
__device__ __forceinline__ ReadHint dramHint(const StreamKernelArgs& args) {
    if (args.policy == kStreamEvictNormal) {
        return {true, sm90::policyEvictNormal()};
    }
    return args.policy >= kStreamDramEvictFirst ? ReadHint{true, sm90::policyEvictFirst()} : ReadHint{false, 0};
}
__device__ __forceinline__ ReadHint l2Hint(const StreamKernelArgs& args) {
    if (args.policy == kStreamEvictNormal) {
        return {true, sm90::policyEvictNormal()};
    }
    return args.policy == kStreamLayer ? ReadHint{true, sm90::policyEvictLast()} : ReadHint{false, 0};
}
__device__ __forceinline__ uint4 loadStreaming(const uint8_t* src, ReadHint hint) {
    uint4 v;
    if (!hint.on) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(reinterpret_cast<uint64_t>(src)));
    } else {
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(reinterpret_cast<uint64_t>(src)), "l"(hint.policy));
    }
    return v;
}
__device__ __forceinline__ void copy16(uint32_t dst, const uint8_t* src, ReadHint hint) {
    if (!hint.on) {
        sm90::cpAsync16(dst, src, true);
    } else {
        sm90::cpAsync16(dst, src, hint.policy);
    }
}
__device__ __forceinline__ void bulk(uint8_t* dst, const uint8_t* src, int64_t bytes, uint64_t* bar, ReadHint hint) {
    if (!hint.on) {
        sm90::bulkLoad(dst, src, static_cast<uint32_t>(bytes), bar);
    } else {
        sm90::bulkLoad(dst, src, static_cast<uint32_t>(bytes), bar, hint.policy);
    }
}

constexpr int64_t kLoaderStageBytes = 32 * 1024;  // the DRAM part of a stage the loader threads fill

// Where the 16-byte vector at byte `offset` of a stage's 128-byte rows goes in the 128-byte swizzle (as TMA's
// SWIZZLE_128B stores it, and wgmma reads it).
__device__ __forceinline__ uint32_t swizzled(uint32_t offset) {
    const uint32_t row = offset >> 7;
    return (row << 7) | ((((offset >> 4) & 7) ^ (row & 7)) << 4);
}

// The loader threads' part of the stages (StreamKernelArgs::stage_load_threads = kThreads; lt in [0, kThreads)):
// thread lt owns the stage's vectors lt, lt + kThreads, ...; it loads stage c + 1's into registers before it waits
// for stage c's slot and stores stage c's, so a stage's loads are in flight while the slot is still being read.
template <int kThreads>
__device__ void loadStagesThroughRegisters(const StreamKernelArgs& args, const uint8_t* dram, uint8_t* ring,
                                           int64_t stage_bytes, uint64_t* full, uint64_t* empty, int lt) {
    constexpr int kVectors = static_cast<int>(kLoaderStageBytes / 16);
    constexpr int kPerThread = (kVectors + kThreads - 1) / kThreads;
    uint4 next[kPerThread];
    const ReadHint hint = dramHint(args);
    auto load = [&](int64_t c) {
        const uint8_t* src = dram + c * kLoaderStageBytes;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int v = j * kThreads + lt;
            if (v < kVectors) {
                next[j] = loadStreaming(src + v * 16, hint);
            }
        }
    };
    load(0);
    for (int64_t c = 0; c < args.tma_stages; ++c) {
        uint4 current[kPerThread];
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            current[j] = next[j];
        }
        if (c + 1 < args.tma_stages) {
            load(c + 1);
        }
        const int s = static_cast<int>(c % args.stages);
        if (c >= args.stages) {
            sm90::mbarWait(&empty[s], static_cast<uint32_t>((c / args.stages) & 1) ^ 1);
        }
        const uint32_t dst = sm90::smemAddr(ring + s * stage_bytes);
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int v = j * kThreads + lt;
            if (v < kVectors) {
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + swizzled(v * 16)),
                             "r"(current[j].x), "r"(current[j].y), "r"(current[j].z), "r"(current[j].w)
                             : "memory");
            }
        }
        sm90::fenceProxyAsyncShared();  // the stage's reader (wgmma in the GEMMs) is the async proxy
        sm90::mbarArrive(&full[s]);
    }
}

// The same by cp.async: stage c's copies are issued as its slot frees and arrive on full[s] when they land.
template <int kThreads>
__device__ void loadStagesByCpAsync(const StreamKernelArgs& args, const uint8_t* dram, uint8_t* ring,
                                    int64_t stage_bytes, uint64_t* full, uint64_t* empty, int lt) {
    constexpr int kVectors = static_cast<int>(kLoaderStageBytes / 16);
    const ReadHint hint = dramHint(args);
    for (int64_t c = 0; c < args.tma_stages; ++c) {
        const int s = static_cast<int>(c % args.stages);
        if (c >= args.stages) {
            sm90::mbarWait(&empty[s], static_cast<uint32_t>((c / args.stages) & 1) ^ 1);
        }
        const uint32_t dst = sm90::smemAddr(ring + s * stage_bytes);
        const uint8_t* src = dram + c * kLoaderStageBytes;
#pragma unroll 4
        for (int v = lt; v < kVectors; v += kThreads) {
            copy16(dst + swizzled(v * 16), src + v * 16, hint);
        }
        sm90::cpAsyncArriveNoinc(&full[s]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

// Waits until *word (shared memory, written by another warp of the CTA) reaches `target`. Bounded like the mbarrier
// waits (sm90_ptx.cuh): a path that stops making progress traps after ~2^28 polls instead of hanging the device.
__device__ __forceinline__ void waitSharedAtLeast(const volatile int64_t* word, int64_t target) {
    uint32_t polls = 0;
    while (*word < target) {
        if (++polls == (1u << 28)) {
            __trap();
        }
    }
}

__global__ void __launch_bounds__(256, 1) streamKernel(const StreamKernelArgs args) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
    const int64_t stage_bytes = args.dram_stage_bytes + args.l2_stage_bytes + args.cp_stage_bytes;
    uint64_t* full = reinterpret_cast<uint64_t*>(ring + args.stages * stage_bytes);
    uint64_t* empty = full + args.stages;
    volatile int64_t* taken = reinterpret_cast<volatile int64_t*>(empty + args.stages);  // stages the TMA path landed
    volatile int64_t* load_progress = taken + 1;  // bytes the load path's first warp has read (tma_paced_by_loads)
    const int tid = threadIdx.x;
    const int64_t cta = blockIdx.x;
    if (tid == 0) {
        *taken = 0;
        *load_progress = 0;
        for (int s = 0; s < args.stages; ++s) {
            sm90::mbarInit(&full[s], 1 + (args.cp_stage_bytes > 0 ? args.cp_threads : 0) + args.stage_load_threads);
            sm90::mbarInit(&empty[s], 1);
        }
        sm90::fenceBarrierInit();
    }
    __syncthreads();
    uint64_t* stamps = args.stamps + cta * kStreamStamps;
    if (tid == 0) {
        stamps[0] = globalTimer();
    }
    // The TMA path: stage c holds dram_stage_bytes from the CTA's DRAM region (the next ones each time), then
    // l2_stage_bytes from its L2 buffer (round robin over the buffer).
    const uint8_t* dram = args.dram + cta * args.region_bytes;
    const uint8_t* l2 = args.l2 + cta * args.l2_bytes;
    const int64_t l2_pieces = args.l2_stage_bytes > 0 ? args.l2_bytes / args.l2_stage_bytes : 0;
    if (tid == 0 && args.tma_stages > 0) {
        const ReadHint dram_hint = dramHint(args);
        const ReadHint l2_hint = l2Hint(args);
        for (int64_t c = 0; c < args.tma_stages; ++c) {
            const int s = static_cast<int>(c % args.stages);
            if (c >= args.stages) {
                sm90::mbarWait(&empty[s], static_cast<uint32_t>((c / args.stages) & 1) ^ 1);
            }
            if (args.tma_paced_by_loads) {
                waitSharedAtLeast(load_progress, 2 * (c + 1) * stage_bytes);
            }
            uint8_t* dst = ring + s * stage_bytes;
            const int64_t tma_bytes = (args.stage_load_threads > 0 ? 0 : args.dram_stage_bytes) + args.l2_stage_bytes;
            sm90::mbarArriveExpectTx(&full[s], static_cast<uint32_t>(tma_bytes));
            if (args.dram_stage_bytes > 0 && args.stage_load_threads == 0) {
                if (args.dram_pieces <= 1) {
                    bulk(dst, dram + c * args.dram_stage_bytes, args.dram_stage_bytes, &full[s], dram_hint);
                } else {
                    const int64_t piece = args.dram_stage_bytes / args.dram_pieces;
                    const uint8_t* item = dram + (c / kStreamItemStages) * kStreamItemStages * args.dram_stage_bytes;
                    for (int p = 0; p < args.dram_pieces; ++p) {
                        bulk(dst + p * piece, item + (p * kStreamItemStages + c % kStreamItemStages) * piece, piece,
                             &full[s], dram_hint);
                    }
                }
            }
            if (args.l2_stage_bytes > 0) {
                bulk(dst + args.dram_stage_bytes, l2 + (c % l2_pieces) * args.l2_stage_bytes, args.l2_stage_bytes,
                     &full[s], l2_hint);
            }
        }
    } else if (tid == 32 && args.tma_stages > 0) {
        for (int64_t c = 0; c < args.tma_stages; ++c) {
            const int s = static_cast<int>(c % args.stages);
            sm90::mbarWait(&full[s], static_cast<uint32_t>((c / args.stages) & 1));
            sm90::mbarArrive(&empty[s]);
            *taken = c + 1;
        }
        stamps[1] = globalTimer();
    } else if (args.stage_load_threads > 0 && tid >= 256 - args.stage_load_threads) {
        const int lt = tid - (256 - args.stage_load_threads);
        if (args.stage_load_threads == 128) {
            if (args.stage_load_cp_async) {
                loadStagesByCpAsync<128>(args, dram, ring, stage_bytes, full, empty, lt);
            } else {
                loadStagesThroughRegisters<128>(args, dram, ring, stage_bytes, full, empty, lt);
            }
        } else if (args.stage_load_cp_async) {
            loadStagesByCpAsync<96>(args, dram, ring, stage_bytes, full, empty, lt);
        } else {
            loadStagesThroughRegisters<96>(args, dram, ring, stage_bytes, full, empty, lt);
        }
    } else if (tid >= 128 && tid < 128 + args.cp_threads && args.cp_stage_bytes > 0) {
        // Part of every stage by cp.async from the L2 buffer, issued as the slot frees, the stage full only when
        // these copies have landed too (as the expert GEMMs' token rows would come beside their TMA weights).
        const int lt = tid - 128;
        const int64_t pieces = args.l2_bytes / args.cp_stage_bytes;
        const int vectors = static_cast<int>(args.cp_stage_bytes / (args.cp_threads * 16));
        const ReadHint hint = l2Hint(args);
        for (int64_t c = 0; c < args.tma_stages; ++c) {
            const int s = static_cast<int>(c % args.stages);
            if (c >= args.stages) {
                sm90::mbarWait(&empty[s], static_cast<uint32_t>((c / args.stages) & 1) ^ 1);
            }
            const uint32_t dst = sm90::smemAddr(ring + s * stage_bytes + args.dram_stage_bytes + args.l2_stage_bytes);
            const uint8_t* src = l2 + (c % pieces) * args.cp_stage_bytes;
            for (int j = 0; j < vectors; ++j) {
                const int64_t off = (static_cast<int64_t>(j) * args.cp_threads + lt) * 16;
                copy16(dst + static_cast<uint32_t>(off), src + off, hint);
            }
            sm90::cpAsyncArriveNoinc(&full[s]);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
    } else if (tid >= 128 && args.lsu_l2_stage_bytes > 0) {
        // The load path paced by the ring: lsu_l2_stage_bytes of the L2 buffer for each stage the TMA path has landed.
        const int lt = tid - 128;
        const int64_t pieces = args.l2_bytes / args.lsu_l2_stage_bytes;
        const int vectors = static_cast<int>(args.lsu_l2_stage_bytes / (kLoadThreads * 16));
        const ReadHint hint = l2Hint(args);
        uint32_t fold = 0;
        // cp.async variant: into a scratch area past the ring (two stages of it, alternately), waited for per stage.
        const uint32_t scratch = sm90::smemAddr(ring) + static_cast<uint32_t>(args.stages * stage_bytes) + 1024;
        for (int64_t c = 0; c < args.tma_stages; ++c) {
            waitSharedAtLeast(taken, c + 1);
            const uint8_t* src = l2 + (c % pieces) * args.lsu_l2_stage_bytes + lt * 16;
            if (args.lsu_cp_async) {
                const uint32_t dst = scratch + static_cast<uint32_t>((c & 1) * args.lsu_l2_stage_bytes) + lt * 16;
#pragma unroll 8
                for (int j = 0; j < vectors; ++j) {
                    copy16(dst + j * kLoadThreads * 16, src + j * kLoadThreads * 16, hint);
                }
                asm volatile("cp.async.wait_all;" ::: "memory");
                continue;
            }
#pragma unroll 8
            for (int j = 0; j < vectors; ++j) {
                const uint4 v = loadStreaming(src + j * kLoadThreads * 16, hint);
                fold ^= v.x ^ v.y ^ v.z ^ v.w;
            }
        }
        if (fold == 0x9e3779b9u) {
            atomicAdd(args.sink, 1u);  // rarely taken; keeps the loads live
        }
        sm90::namedBarrierSync(1, kLoadThreads);
        if (lt == 0) {
            stamps[2] = globalTimer();
        }
    } else if (tid >= 128 && args.lsu_bytes > 0) {
        // The load path: its own DRAM region after the TMA's, kLoadThreads x kLoads x 16 bytes per step.
        const int lt = tid - 128;
        const uint8_t* base = dram + args.lsu_offset;
        constexpr int64_t kStep = static_cast<int64_t>(kLoadThreads) * kLoads * 16;
        const ReadHint hint = dramHint(args);
        uint32_t fold = 0;
        for (int64_t off = 0; off < args.lsu_bytes; off += kStep) {
            uint4 v[kLoads];
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                v[j] = loadStreaming(base + off + (j * kLoadThreads + lt) * 16, hint);
            }
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                fold ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
            }
            if (lt == 0) {
                *load_progress = off + kStep;
            }
        }
        if (lt == 0) {
            *load_progress = INT64_MAX;  // the TMA path may finish whatever it has left
        }
        if (fold == 0x9e3779b9u) {
            atomicAdd(args.sink, 1u);  // rarely taken; keeps the loads live
        }
        sm90::namedBarrierSync(1, kLoadThreads);
        if (lt == 0) {
            stamps[2] = globalTimer();
        }
    }
}

}  // namespace

size_t streamKernelSharedBytes(const StreamKernelArgs& args) {
    const size_t ring = 1024 +
                        static_cast<size_t>(args.stages) *
                            static_cast<size_t>(args.dram_stage_bytes + args.l2_stage_bytes + args.cp_stage_bytes) +
                        2 * static_cast<size_t>(args.stages) * 8 + 16 + 1024 +
                        2 * static_cast<size_t>(args.lsu_l2_stage_bytes);
    return ring > kOneCtaPerSmBytes ? ring : kOneCtaPerSmBytes;
}
int64_t streamKernelLoadStepBytes() { return static_cast<int64_t>(kLoadThreads) * kLoads * 16; }

cudaError_t launchStreamKernel(const StreamKernelArgs& args, int ctas, cudaStream_t stream) {
    const size_t smem = streamKernelSharedBytes(args);
    const cudaError_t err =
        cudaFuncSetAttribute(streamKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) {
        return err;
    }
    streamKernel<<<ctas, 256, smem, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace afd::lab
