// The producer warpgroup of a grouped GEMM CTA (moe_grouped_gemm.cuh): thread 0 takes the items and issues every TMA
// copy into the ring of stages (weights, and token boxes for the token-TMA shapes); the 128 threads gather token rows
// by cp.async in the small shapes and tall128g. In the gate-up kernels that gather x themselves warps 1-3 copy
// x_sorted, and with the down kernel starting per expert (GroupedGemmArgs::h_ready) warp 3 counts the items the
// consumers finished; in tall128g thread 0 counts them between its copies and all 128 threads read the item ring.
#pragma once

#include <cuda.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/moe_expert_ready.cuh"
#include "kernels/cuda/moe_gemm_kernel_common.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_slot_gather.cuh"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
struct Producer : KernelCommon<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens> {
    using Base = KernelCommon<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    using L = typename Base::L;
    using Shared = typename Base::Shared;
    using Base::consumerGatherSlots;
    using Base::finishTaking;
    using Base::fullBoxes;
    using Base::itemAt;
    using Base::publishItem;
    using Base::tokenBoxes;
    using Base::tokenBoxRows;
    using Base::waitBar;
    // 16-byte vectors of a row each lane of a gathering warp holds at once: the producer of the register-rebalanced
    // shapes has 72 registers.
    static constexpr int kGatherVectors = L::kRebalanceRegs ? 4 : 8;
    static constexpr int kGatherRows = (L::kRebalanceRegs || L::kStreamsBesideGather) ? 1 : 2;
    // Named barrier of the producer warpgroup (the consumer warpgroups use 1 + wg).
    static constexpr int kProducerBarrier = 1 + kConsumers;

    // Weight tile of (item, kb) into stage `stage`: arrive.expect_tx (for the token boxes too with kTmaTokens)
    // then the TMA copies. Block bl of the tile (consumer bl / kMBlocks, accumulator bl % kMBlocks) is smem rows
    // [64 bl, 64 bl + 64).
    __device__ __forceinline__ static void issueWeights(const CUtensorMap* tmap, const GroupedGemmArgs& args,
                                                        const Shared& sh, int stage, const Item& item, int kb,
                                                        uint64_t policy) {
        uint8_t* a = sh.base + L::kAOffset + stage * L::kABytes;
        uint64_t* bar = &sh.full[stage];
        uint32_t tx = L::kABytes;
        if constexpr (kTmaTokens) {
            const int npad = paddedTokens<kBlockTokens>(item.ntok);
            tx += tokenBoxes(npad) * tokenBoxRows(npad) * kRowBytes;
        }
        sm90::mbarArriveExpectTx(bar, tx);
        // box {64 k, 64 rows, kBlocks units of 64 rows, 1 k-block, 1 expert}: kBlocks blocks of 8 KB, one run of
        // contiguous memory (moe_pack_weights.cu: gate-up units interleave gate and up rows by 8)
        sm90::tmaLoad5d(a, tmap, bar, 0, 0, item.n_tile * L::kBlocks, kb, item.expert, policy);
    }

    // kTmaTokens: the item's token rows [slot_base, slot_base + npad) of b_src in tokenBoxes(npad) boxes (rows
    // past the expert's tokens belong to other experts or are zero-filled past the end; their columns are never
    // stored).
    __device__ __forceinline__ static void issueTokenBoxes(const CUtensorMap* tmap_b, const CUtensorMap* tmap_b_full,
                                                           const Shared& sh, int stage, const Item& item, int npad,
                                                           int kb, uint64_t policy) {
        uint8_t* b = sh.base + L::kBOffset + stage * L::kBBytes;
        const CUtensorMap* tmap = fullBoxes(npad) ? tmap_b_full : tmap_b;
        const int rows = tokenBoxRows(npad);
        for (int box = 0; box < tokenBoxes(npad); ++box) {
            sm90::tmaLoad2d(b + box * rows * kRowBytes, tmap, &sh.full[stage], kb * kBlockK,
                            item.slot_base + box * rows, policy);
        }
    }

    // Per item: element offsets in b_src of the token rows this producer thread copies (rows ptid/8 + 16q),
    // -1 for rows past the item's tokens.
    __device__ __forceinline__ static void tokenRowOffsets(const GroupedGemmArgs& args, const Shared& sh,
                                                           const Item& item, int ptid,
                                                           int (&offsets)[L::kRowsPerThread]) {
#pragma unroll
        for (int q = 0; q < L::kRowsPerThread; ++q) {
            const int row = (ptid >> 3) + 16 * q;
            int offset = -1;
            if (row < item.ntok) {
                const int slot = item.slot_base + row;
                int src_row = slot;
                if constexpr (kGateUp) {
                    src_row = sh.slot_token != nullptr ? sh.slot_token[slot] : __ldg(args.slot_token + slot);
                }
                offset = src_row * args.b_ld;
            }
            offsets[q] = offset;
        }
    }

    // Token tile of (item, kb) into stage `stage` by the 128 producer threads (ptid), rows [0, npad) in 16-byte
    // chunks (thread: chunk ptid % 8 of rows ptid/8 + 16q); rows past ntok and columns past k are zero-filled.
    __device__ __forceinline__ static void issueTokens(const GroupedGemmArgs& args, const Shared& sh, int stage,
                                                       const int (&offsets)[L::kRowsPerThread], int npad, int kb,
                                                       int ptid, uint64_t policy) {
        const uint32_t b_addr = sm90::smemAddr(sh.base + L::kBOffset + stage * L::kBBytes);
        const int chunk = ptid & 7;
        const int k = kb * kBlockK + chunk * 8;
        const bool k_valid = k < args.k;
#pragma unroll
        for (int q = 0; q < L::kRowsPerThread; ++q) {
            const int row = (ptid >> 3) + 16 * q;
            if (row < npad) {
                const bool valid = k_valid && offsets[q] >= 0;
                const uint16_t* src = valid ? args.b_src + offsets[q] + k : args.b_src;
                const uint32_t dst = b_addr + row * kRowBytes + ((chunk ^ (row & 7)) << 4);
                if constexpr (L::kTall128Gather) {
                    // As the token TMA boxes: the rows stay in L2 while the weights stream past them (evict_first).
                    sm90::cpAsync16(dst, src, valid, policy);
                } else {
                    sm90::cpAsync16(dst, src, valid);
                }
            }
        }
    }

    __device__ static void produce(const CUtensorMap* tmap, const CUtensorMap* tmap_b, const CUtensorMap* tmap_b_full,
                                   const GroupedGemmArgs& args, const Shared& sh, int total_items, int k_blocks) {
        const int ptid = threadIdx.x;
        if constexpr (kGateUp && kTmaTokens) {
            // Warps 1-3 copy token rows (NOTE: rows = experts for the token-TMA shapes) while the TMA thread goes on;
            // with h_ready warp 3 counts the finished items instead (a gathering warp would post them late).
            const int gather_warps = args.h_ready != nullptr ? 2 : 3;
            if (args.gather_x != nullptr && ptid >= 32 && ptid < 32 * (1 + gather_warps)) {
                if (args.permute_ready != nullptr) {
                    sm90::waitAtLeastAcquire(args.permute_ready + 1, args.permute_ready_ctas);  // slot_token
                }
                gatherSlotsByWarps<kGatherVectors, kGatherRows>(args.gather_x, args.slot_token, args.gather_out, args.k,
                                                                sh.slots, sh.rows, args.gathered, consumerGatherSlots(),
                                                                INT_MAX, gather_warps, (ptid >> 5) - 1);
            }
            if (ptid == 96 && args.h_ready != nullptr) {
                countItemsDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, args.h_ready);
            }
            if (ptid >= 32 && (args.gather_x != nullptr || args.h_ready != nullptr)) {
                return;
            }
        }
        if constexpr (Base::kCombinesByPart && kTmaTokens) {
            // Warp 3 counts the items the consumers finished per part (it takes no part in the copies).
            if (args.part_done != nullptr && ptid >= 96) {
                if (ptid == 96) {
                    countItemsDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, args.part_done);
                }
                return;
            }
        }
        const uint64_t token_policy = sm90::policyEvictLast();
        int prefetched = 0;
        // The gate-up kernels that gather their own token rows stream their first weights before the first expert's
        // rows are complete (they waited for the previous kernel at the start).
        bool prefetch_block = !kGateUp || L::kStreamsBesideGather;
        bool prefetch_first = args.prefetch_before_wait != 0;
        if constexpr (kGateUp && kTmaTokens) {
            prefetch_block = prefetch_block || args.gather_x != nullptr;
            prefetch_first = prefetch_first || args.gather_x != nullptr;
        }
        if (prefetch_block) {
            // The weights do not depend on the previous kernel: start streaming them before waiting for it (with
            // dynamic scheduling only the first item is known before the wait).
            for (int it = sh.item_begin; prefetch_first && it < total_items && prefetched < kStages;
                 it += sh.item_stride) {
                const Item item = itemAt(it, args, sh);
                const uint64_t policy = weightCachePolicy(args, item);
                for (int kb = 0; kb < k_blocks && prefetched < kStages; ++kb, ++prefetched) {
                    if (ptid == 0) {
                        issueWeights(tmap, args, sh, prefetched, item, kb, policy);
                    }
                }
                if (sh.dynamic) {
                    break;
                }
            }
            // Beside the slot-order gather the gate-up producer waits per expert for x_sorted rows, the down producer
            // per expert for h rows with h_ready.
            if (kGateUp ? args.gathered == nullptr : args.h_ready == nullptr) {
                sm90::gridDependencyWait();
            }
            if (kGateUp && args.permute_ready != nullptr) {
                // The down kernel reads the permute's words before its own wait.
                sm90::waitAtLeastAcquire(args.permute_ready + 1, args.permute_ready_ctas);
            }
            sm90::launchDependents();
        }
        if (kTmaTokens && ptid != 0) {
            return;  // one thread issues every copy
        }
        // tall128g: every producer thread copies token rows, and thread 0 also counts the consumers' posts between its
        // copies (h_ready in the gate-up kernel, part_done in the down kernel; ItemDonePoller), including while it
        // waits, since consumers blocked on a full post ring release no stage.
        int32_t* counts = nullptr;
        if constexpr (L::kTall128Gather) {
            counts = kGateUp ? args.h_ready : args.part_done;
        }
        const bool counting = counts != nullptr && ptid == 0;
        ItemDonePoller<L::kItemSlots> poller;
        [[maybe_unused]] int ready_expert = -1;
        int iter = 0;
        int next = 0;
        int it = sh.item_begin;
        // n: the CTA's n-th item (dynamic scheduling hands each to the consumers).
        for (int n = 0;; ++n) {
            if (n > 0) {
                if (!sh.dynamic) {
                    it += sh.item_stride;
                } else {
                    it = next;
                }
            }
            if (sh.dynamic) {
                if constexpr (L::kTall128Gather) {
                    // Thread 0 takes the item and publishes it; every producer thread (thread 0 too) reads it back.
                    if (ptid == 0) {
                        if (counting) {
                            const int slot = n % L::kItemSlots;
                            poller.waitPolling(&sh.item_empty[slot], ((n / L::kItemSlots) & 1) ^ 1, sh.done, counts);
                        }
                        publishItem(sh, n, it < total_items ? it : -1);
                    }
                    it = Base::takeItem(sh, n);
                    if (it < 0) {
                        if (ptid == 0) {
                            finishTaking(args);
                        }
                        break;
                    }
                    if (ptid == 0) {
                        next = sh.item_stride + atomicAdd(args.schedule, 1);  // in flight while the copies are issued
                    }
                } else {
                    publishItem(sh, n, it < total_items ? it : -1);
                    if (it >= total_items) {
                        finishTaking(args);
                        break;
                    }
                    next = sh.item_stride + atomicAdd(args.schedule, 1);  // in flight while the copies are issued
                }
            } else if (it >= total_items) {
                break;
            }
            const Item item = itemAt(it, args, sh);
            const uint64_t policy = weightCachePolicy(args, item);
            const int npad = paddedTokens<kBlockTokens>(item.ntok);
            int offsets[L::kRowsPerThread];
            if constexpr (!kTmaTokens) {
                tokenRowOffsets(args, sh, item, ptid, offsets);
            }
            for (int kb = 0; kb < k_blocks; ++kb, ++iter) {
                const int stage = iter % kStages;
                const uint32_t phase = (iter / kStages) & 1;
                if (iter >= prefetched) {
                    if (counting) {
                        poller.waitPolling(&sh.empty[stage], phase ^ 1, sh.done, counts);
                    } else {
                        waitBar(&sh.empty[stage], phase ^ 1);
                    }
                    if (ptid == 0) {
                        issueWeights(tmap, args, sh, stage, item, kb, policy);
                    }
                }
                if constexpr (!kGateUp && (kTmaTokens || L::kTall128Gather)) {
                    // The down kernel per expert: the item's expert's h rows are stored. In tall128g every producer
                    // thread acquires the count before it copies its rows of h.
                    if (kb == 0 && args.h_ready != nullptr && item.expert != ready_expert) {
                        waitExpertReady(
                            args.h_ready, item.expert,
                            args.h_ready_items_per_tile * (sh.tiles[item.expert + 1] - sh.tiles[item.expert]));
                        ready_expert = item.expert;
                    }
                }
                if constexpr (kTmaTokens) {
                    if constexpr (kGateUp) {
                        // The item's expert's rows of x_sorted are written (once per run of items of one expert).
                        // NOTE: rows = experts (no fused routing for the token-TMA shapes): row e is expert e.
                        if (kb == 0 && args.gathered != nullptr && item.expert != ready_expert) {
                            waitExpertRows(args.gathered, item.expert,
                                           sh.slots[item.expert + 1] - sh.slots[item.expert]);
                            ready_expert = item.expert;
                        }
                    }
                    issueTokenBoxes(tmap_b, tmap_b_full, sh, stage, item, npad, kb, token_policy);
                } else {
                    issueTokens(args, sh, stage, offsets, npad, kb, ptid, token_policy);
                    sm90::cpAsyncArriveNoinc(&sh.full[stage]);
                    if (counting) {
                        poller.poll(sh.done, counts);
                    }
                }
            }
        }
        if constexpr (kTmaTokens) {
            int32_t* ready_counts = kGateUp ? args.gathered : args.h_ready;
            if (ready_counts != nullptr) {
                releaseExpertCounts(ready_counts, kGateUp ? args.gathered_exit : args.h_ready_exit, args.num_experts);
            }
        }
        if constexpr (L::kTall128Gather) {
            if (counting) {
                poller.finish(sh.done, counts);
            }
            if (!kGateUp && args.h_ready != nullptr) {
                // Every producer thread of the CTA is done with h_ready before the CTA counts itself out (the last CTA
                // zeroes the counts).
                sm90::namedBarrierSync(kProducerBarrier, kWarpgroup);
                if (ptid == 0) {
                    releaseExpertCounts(args.h_ready, args.h_ready_exit, args.num_experts);
                }
            }
        }
    }
};

}  // namespace afd::kernels::cuda::grouped_gemm
