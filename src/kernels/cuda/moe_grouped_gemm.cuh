// Persistent grouped expert GEMM for Hopper (sm_90a), the two projections of the routed-expert MoE:
//   gate-up: h[slot, i] = silu(Wg[e][i] . x[token(slot)]) * (Wu[e][i] . x[token(slot)])     (SwiGLU fused)
//   down:    y[slot, r] = W2[e][r] . h[slot]
// computed as D = W . X^T ("swap AB"): weight rows fill the 64-row M side of wgmma and a tile of up to
// kBlockTokens tokens of one expert is the N side, so a decode step with one token per expert still runs
// m64n8 instructions while the weights stream at full rate.
//
// Work item = (expert, weight-row tile, token tile), listed expert-major with the token tile fastest so that
// items sharing a weight tile run at the same time and share it in L2. The grid is persistent (occupancy x SMs)
// and each CTA takes items blockIdx.x, blockIdx.x + gridDim.x, … The item list comes from the permute stage's
// device-side offsets: the host never learns the counts.
//
// CTA = one producer warpgroup + kConsumers consumer warpgroups, each owning kMBlocks blocks of 64 weight rows
// (one accumulator per block), a kStages-deep ring of shared-memory stages,
// each stage = weight tile [64 * kConsumers * kMBlocks rows x 64 k] loaded by TMA (thread 0) + token tile
// [kBlockTokens x 64 k], either gathered with 16-byte cp.async by the 128 producer threads (rows of x picked
// through slot_token, or rows of h in slot order; each thread keeps its rows' offsets for the whole item) or,
// with kTmaTokens, one more TMA box of rows in slot order. Both land in the 128-byte swizzled K-major layout
// wgmma reads. full[s] completes on 1 arrive.expect_tx (the TMA bytes) + 128 cp.async arrivals (none with
// kTmaTokens); empty[s] on one arrival per consumer thread once its wgmma reading the stage has retired.
//
// Gate-up rows are interleaved by TMA so that each consumer thread holds gate and up of the same intermediate
// column: within each 16-row group of a warp, smem rows 0-7 are 8 gate rows and rows 8-15 the matching up rows
// (the wgmma accumulator gives a thread rows r and r + 8). The 5-D view (k, row in group, gate/up, group,
// expert) of w13 does this in one box per stage.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_fused_routing.cuh"
#include "kernels/cuda/moe_gemm_consumer.cuh"
#include "kernels/cuda/moe_gemm_kernel_common.cuh"
#include "kernels/cuda/moe_gemm_producer.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

// The kernel's body; tmap, tmap_b and tmap_b_full point at the kernel's __grid_constant__ parameters.
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
__device__ __forceinline__ void groupedGemm(const CUtensorMap* tmap, const CUtensorMap* tmap_b,
                                            const CUtensorMap* tmap_b_full, const GroupedGemmArgs& args) {
    using K = KernelCommon<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    using L = typename K::L;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
    typename K::Shared sh;
    sh.base = base;
    sh.full = reinterpret_cast<uint64_t*>(base + L::kBarOffset);
    sh.empty = sh.full + kStages;
    int* tiles = reinterpret_cast<int*>(base + L::kPrefixOffset);
    int* slots = tiles + args.num_experts + 1;
    sh.tiles = tiles;
    sh.slots = slots;
    sh.experts = nullptr;
    sh.rows = args.num_experts;
    sh.entry_slot = args.combine.entry_slot;
    sh.weights = args.combine.topk_weights;
    sh.slot_token = nullptr;
    sh.item_begin = static_cast<int>(blockIdx.x);
    sh.item_stride = static_cast<int>(gridDim.x);
    sh.dynamic = (kTmaTokens || L::kTall128Gather) && args.schedule != nullptr;
    sh.item_full = reinterpret_cast<uint64_t*>(base + L::kItemBarOffset);
    sh.item_empty = sh.item_full + L::kItemSlots;
    sh.item_ring = reinterpret_cast<int*>(base + L::kItemRingOffset);
    sh.done.full = reinterpret_cast<uint64_t*>(base + L::kDoneBarOffset);
    sh.done.empty = sh.done.full + L::kItemSlots;
    sh.done.ring = reinterpret_cast<int*>(base + L::kDoneRingOffset);

    // NOTE: the barriers in Layout's gap after the item ring are initialised though nothing waits on them, as the
    // kernels' machine code was measured.
    uint64_t* const spare_bars = reinterpret_cast<uint64_t*>(base + L::kSpareBarOffset);
    if (threadIdx.x == 0) {
        sm90::prefetchTensorMap(tmap);
        if constexpr (kTmaTokens) {
            sm90::prefetchTensorMap(tmap_b);
            sm90::prefetchTensorMap(tmap_b_full);
        }
        for (int s = 0; s < kStages; ++s) {
            sm90::mbarInit(&sh.full[s], kTmaTokens ? 1 : kWarpgroup + 1);
            sm90::mbarInit(&sh.empty[s], L::kEmptyArrivals);
        }
        for (int s = 0; s < L::kItemSlots; ++s) {
            sm90::mbarInit(&sh.item_full[s], 1);
            sm90::mbarInit(&sh.item_empty[s], L::kItemReaders);
            sm90::mbarInit(&spare_bars[s], 1);
            sm90::mbarInit(&spare_bars[L::kItemSlots + s], 1);
            sm90::mbarInit(&sh.done.full[s], kConsumers);
            sm90::mbarInit(&sh.done.empty[s], 1);
        }
        sm90::fenceBarrierInit();
    }
    // The gate-up kernel that streams beside the gather waits for it in its roles (as the down kernel does): its
    // weights do not depend on it, and the permute stage's offsets were complete before the gather let it launch.
    // A gate-up kernel that gathers its own token rows reads the permute stage's slot tokens: it waits here.
    const bool wait_in_roles =
        !kGateUp || (L::kStreamsBesideGather && args.prefetch_before_wait && args.gather_x == nullptr);
    // Beside the slot-order gather no thread waits for the gather grid: the producer waits per expert.
    // Nor with the down kernel starting per expert (h_ready): the producer waits per expert.
    const bool consumers_wait = wait_in_roles && (kGateUp ? args.gathered == nullptr : args.h_ready == nullptr);
    // The permute's words instead of its grid (GroupedGemmArgs::permute_ready): one thread acquires, the barrier orders
    // the other threads' reads of the offsets after it.
    const bool on_permute_words = kGateUp && kTmaTokens && args.permute_ready != nullptr;
    if (!wait_in_roles && on_permute_words) {
        if (threadIdx.x == 0) {
            sm90::waitAtLeastAcquire(args.permute_ready, 1);
        }
        __syncthreads();
    } else if (!wait_in_roles) {
        // Reads the permute stage's offsets (or the routing) and the previous layer's x: wait for the previous
        // kernel.
        sm90::gridDependencyWait();
        sm90::launchDependents();
    }
    if constexpr (kGateUp) {
        if (blockIdx.x == 0) {
            // The down kernel's fused-combine counters and schedule (it reads them after waiting for this kernel).
            for (int i = threadIdx.x; i < args.combine.num_counters; i += blockDim.x) {
                args.combine.counters[i] = 0;
            }
            if (args.down_schedule != nullptr && threadIdx.x < kScheduleWords) {
                args.down_schedule[threadIdx.x] = 0;
            }
        }
    }
    // NOTE: the down kernel reads the offsets (or the routing) before its dependency wait; the kernels that wrote
    // them finished before the gate-up kernel (which this one waits for) let it launch.
    if (!kTmaTokens && args.fused_entries > 0) {  // the scratch exists for the cp.async shapes only
        int* s_ids = slots + args.num_experts + 1;
        int* s_slot_token = s_ids + kMoeFusedRoutingEntries;
        int* s_counts = s_slot_token + kMoeFusedRoutingEntries;
        if (args.fused_entries <= kWarpRoutingEntries) {
            // s_ids holds the compact rows' experts [0, 32), the entries' slots [32, 64) and weights [64, 96).
            static_assert(3 * kWarpRoutingEntries <= kMoeFusedRoutingEntries, "one-warp routing scratch");
            int* s_entry_slot = s_ids + kWarpRoutingEntries;
            float* s_weight = reinterpret_cast<float*>(s_ids + 2 * kWarpRoutingEntries);
            sh.rows = fusedRoutingWarp(args, kBlockTokens, kGateUp && blockIdx.x == 0, s_ids, s_slot_token, s_counts,
                                       tiles, slots, s_entry_slot, s_weight);
            sh.experts = s_ids;
            sh.entry_slot = s_entry_slot;
            sh.weights = s_weight;
        } else {
            fusedRouting(args, kBlockTokens, kGateUp && blockIdx.x == 0, s_ids, s_slot_token, s_counts, tiles, slots);
        }
        sh.slot_token = s_slot_token;
    } else {
        for (int i = threadIdx.x; i <= args.num_experts; i += blockDim.x) {
            tiles[i] = args.tile_offset[i];
            slots[i] = args.slot_offset[i];
        }
        __syncthreads();
    }
    const int total_items = tiles[sh.rows] * args.n_tiles;
    const int k_blocks = (args.k + kBlockK - 1) / kBlockK;
    const int warpgroup = threadIdx.x / kWarpgroup;
    // NOTE: setmaxnreg only for tiles over 256 tokens (Layout::kRebalanceRegs): the uniform 168-register budget of
    // 384 threads holds the 128 accumulators of a 64 x 256 tile, and a 56-register producer spilled in its address
    // arithmetic.
    if (warpgroup == 0) {
        if constexpr (L::kRebalanceRegs) {
            sm90::setMaxRegsDec<L::kProducerRegs>();
        }
        Producer<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>::produce(
            tmap, tmap_b, tmap_b_full, args, sh, total_items, k_blocks);
    } else {
        if constexpr (L::kRebalanceRegs) {
            sm90::setMaxRegsInc<L::kConsumerRegs>();
        }
        if (consumers_wait) {
            sm90::gridDependencyWait();
            sm90::launchDependents();
        }
        Consumer<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>::consume(args, sh, total_items,
                                                                                            k_blocks, warpgroup - 1);
    }
    if (on_permute_words && threadIdx.x == 0) {
        sm90::gridDependencyWait();  // this grid completes after the scatter grid, as in a plain stream
    }
    if (!kGateUp && args.h_ready != nullptr && threadIdx.x == 0) {
        // No thread waited for the gate-up grid (h_ready): this grid still completes after it, as in a plain stream, so
        // that a kernel waiting for this one (the combine, the next layer's permute) finds the gate-up kernel complete,
        // its last CTA's zeroing of the gather counts included.
        sm90::gridDependencyWait();
    }
}

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
__global__ void __launch_bounds__(
    kWarpgroup*(kConsumers + 1),
    Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>::kMinCtasPerSm)
    groupedGemmKernel(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap tmap_b,
                      const __grid_constant__ CUtensorMap tmap_b_full, const GroupedGemmArgs args) {
    groupedGemm<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>(&tmap, &tmap_b, &tmap_b_full, args);
}

// The same kernel with its registers capped at Layout::kBesideGatherRegs instead of the launch bounds' whole register
// file, for the gate-up kernels that stream beside the gather (Layout::kStreamsBesideGather; nvcc takes one of the
// two qualifiers per kernel).
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
__global__ void __maxnreg__(
    (Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>::kBesideGatherRegs))
    groupedGemmKernelBesideGather(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap tmap_b,
                                  const __grid_constant__ CUtensorMap tmap_b_full, const GroupedGemmArgs args) {
    groupedGemm<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>(&tmap, &tmap_b, &tmap_b_full, args);
}

}  // namespace afd::kernels::cuda::grouped_gemm
