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
// With kCluster = 2 the two CTAs of a cluster take the same sequence of (expert, token tile, pair of adjacent
// weight tiles) items, CTA rank r the weight tile 2p + r, and each loads half of the item's token boxes into both
// CTAs (TMA multicast). A stage is refilled only when the consumers of both CTAs have released it: each consumer
// warp arrives on empty[s] of both CTAs, and full[s] expects the whole token tile, half of it from the peer.
//
// Gate-up rows are interleaved by TMA so that each consumer thread holds gate and up of the same intermediate
// column: within each 16-row group of a warp, smem rows 0-7 are 8 gate rows and rows 8-15 the matching up rows
// (the wgmma accumulator gives a thread rows r and r + 8). The 5-D view (k, row in group, gate/up, group,
// expert) of w13 does this in one box per stage.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/moe_expert_ready.cuh"
#include "kernels/cuda/moe_fused_combine.cuh"
#include "kernels/cuda/moe_fused_routing.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_slot_gather.cuh"
#include "kernels/cuda/moe_stages.h"
#include "kernels/cuda/sm90_ptx.cuh"
#include "kernels/cuda/sm90_wgmma.cuh"

namespace afd::kernels::cuda::grouped_gemm {

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
struct Kernel {
    using L = Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;

    struct Shared {
        uint8_t* base;
        uint64_t* full;
        uint64_t* empty;
        const int* tiles;
        const int* slots;
        const int* experts;     // compact routing rows' experts, or null (row = expert)
        const int* entry_slot;  // fused combine: slot of each entry and its routing weight (shared copies with the
        const float* weights;   // one-warp routing, else args.combine's arrays)
        int rows;               // rows of tiles / slots before the totals
        const int* slot_token;  // shared copy with fused routing, else null (read args.slot_token)
        int rank;               // CTA rank in the cluster
        int item_begin;         // first item (pair of items with kCluster = 2) of this CTA, and the stride
        int item_stride;
        bool dynamic;          // later items from args.schedule, handed over through the item ring
        uint64_t* item_full;   // [kItemSlots]
        uint64_t* item_empty;  // [kItemSlots]
        int* item_ring;        // [kItemSlots] item number, -1 = no more items
        uint64_t* pair_full;   // kCluster = 2: [kItemSlots] the item words rank 0 sent to rank 1
        uint64_t* pair_empty;  // [kItemSlots] rank 1 has read them
        int* pair_ring;        // [kItemSlots]
        ItemDoneRing done;     // gate-up with GroupedGemmArgs::h_ready: the items the consumers finished
    };

    // mbarWait, with the trap out of line where setmaxnreg raised the consumers' registers (mbarWaitColdTrap).
    __device__ __forceinline__ static void waitBar(uint64_t* bar, uint32_t parity) {
        if constexpr (L::kRebalanceRegs) {
            sm90::mbarWaitColdTrap(bar, parity);
        } else {
            sm90::mbarWait(bar, parity);
        }
    }

    // Diagnostics: the time (or, for kTraceItems, a count) of `event` for this CTA (MoeCudaOptions::trace).
    __device__ __forceinline__ static void trace(const GroupedGemmArgs& args, int event, uint64_t value) {
        if (args.trace != nullptr && blockIdx.x < static_cast<unsigned>(kMoeTraceMaxCtas)) {
            args.trace[blockIdx.x * kMoeTraceSlots + event] = value;
        }
    }
    __device__ __forceinline__ static void traceNow(const GroupedGemmArgs& args, int event) {
        if (args.trace != nullptr) {
            trace(args, event, sm90::globalTimer());
        }
    }

    // Dynamic scheduling (token-TMA shapes: one producer thread), producer side: hands item number `value` (-1: none
    // left) to the consumers as the CTA's n-th item.
    __device__ __forceinline__ static void publishItem(const Shared& sh, int n, int value) {
        const int slot = n % L::kItemSlots;
        waitBar(&sh.item_empty[slot], ((n / L::kItemSlots) & 1) ^ 1);
        sh.item_ring[slot] = value;
        sm90::mbarArrive(&sh.item_full[slot]);  // release: the ring store is visible to the waiting consumers
    }
    // Consumer side (every consumer thread): the CTA's n-th item number, -1 when there is none.
    __device__ __forceinline__ static int takeItem(const Shared& sh, int n) {
        const int slot = n % L::kItemSlots;
        waitBar(&sh.item_full[slot], (n / L::kItemSlots) & 1);
        const int value = sh.item_ring[slot];
        sm90::mbarArrive(&sh.item_empty[slot]);
        return value;
    }
    // CTA pairs: the producer of rank 0 sends the item number of the CTA's n-th item (n >= 1) to rank 1's, which
    // receives it; one word per item through pair_ring, flow-controlled by pair_empty.
    __device__ __forceinline__ static void sendPairItem(const Shared& sh, int n, int value) {
        const int m = n - 1;
        const int slot = m % L::kItemSlots;
        sm90::mbarWaitCluster(&sh.pair_empty[slot], ((m / L::kItemSlots) & 1) ^ 1);
        sm90::sendToPeer(&sh.pair_ring[slot], value, &sh.pair_full[slot], 1);
    }
    __device__ __forceinline__ static int receivePairItem(const Shared& sh, int n) {
        const int m = n - 1;
        const int slot = m % L::kItemSlots;
        sm90::mbarWaitCluster(&sh.pair_full[slot], (m / L::kItemSlots) & 1);
        const int value = sh.pair_ring[slot];
        sm90::mbarArriveClusterRelease(&sh.pair_empty[slot], 0);
        return value;
    }

    // The producer has taken its last item (with CTA pairs: rank 0's producer): the CTA that completes the count
    // resets both counters, so that the next launch (a replay of this kernel alone included) starts from zero.
    // Every CTA has finished taking by then, and the next launch reads the counters only after this grid has
    // completed.
    __device__ __forceinline__ static void finishTaking(const GroupedGemmArgs& args) {
        if (atomicAdd(args.schedule + 1, 1) == static_cast<int>(gridDim.x) / kCluster - 1) {
            args.schedule[0] = 0;
            args.schedule[1] = 0;
        }
    }

    // Item `it` of this CTA: with kCluster = 2, `it` numbers (expert, weight-tile pair, token tile) and the CTA
    // takes the pair's weight tile of its rank.
    __device__ __forceinline__ static Item itemAt(int it, const GroupedGemmArgs& args, const Shared& sh) {
        Item item = decodeItem<kBlockTokens>(it, sh.tiles, sh.slots, sh.experts, sh.rows, args.n_tiles / kCluster);
        item.n_tile = item.n_tile * kCluster + sh.rank;
        return item;
    }

    // Token TMA boxes of an item: one box of kBlockTokens / kCluster rows per cluster CTA (from tmap_b_full) when the
    // padded count fills a tile that fits one box per CTA (fewer TMA issues), else enough boxes of kTokenBoxRows
    // for the padded count. Box b is issued by CTA rank b % kCluster.
    __device__ __forceinline__ static bool fullBoxes(int npad) { return L::kFullTokenBox && npad == kBlockTokens; }
    __device__ __forceinline__ static int tokenBoxes(int npad) {
        return fullBoxes(npad) ? kCluster : (npad + L::kTokenBoxRows - 1) / L::kTokenBoxRows;
    }
    __device__ __forceinline__ static int tokenBoxRows(int npad) {
        return fullBoxes(npad) ? kBlockTokens / kCluster : L::kTokenBoxRows;
    }

    // Weight tile of (item, kb) into stage `stage`: arrive.expect_tx (for the token boxes too with kTmaTokens)
    // then the TMA copies. Block bl of the tile (consumer bl / kMBlocks, accumulator bl % kMBlocks) is smem rows
    // [64 bl, 64 bl + 64).
    __device__ __forceinline__ static void issueWeights(const CUtensorMap* tmap, const GroupedGemmArgs& args,
                                                        const Shared& sh, int stage, const Item& item, int kb,
                                                        uint64_t policy) {
        uint8_t* a = sh.base + L::kAOffset + stage * L::kABytes;
        uint64_t* bar = &sh.full[stage];
        uint32_t tx = kDiagSkipWeights ? 0 : L::kABytes;
        if constexpr (kTmaTokens && !kDiagSkipTokens) {
            const int npad = paddedTokens<kBlockTokens>(item.ntok);
            tx += tokenBoxes(npad) * tokenBoxRows(npad) * kRowBytes;
        }
        sm90::mbarArriveExpectTx(bar, tx);
        if constexpr (kDiagSkipWeights) {
            return;
        }
        // box {64 k, 64 rows, 1 k-block, kBlocks units of 64 rows, 1 expert}: kBlocks blocks of 8 contiguous KB
        // (moe_pack_weights.cu: gate-up units interleave gate and up rows by 8)
        sm90::tmaLoad5d(a, tmap, bar, 0, 0, kb, item.n_tile * L::kBlocks, item.expert, policy);
    }

    // kTmaTokens: the item's token rows [slot_base, slot_base + npad) of b_src in tokenBoxes(npad) boxes (rows
    // past the expert's tokens belong to other experts or are zero-filled past the end; their columns are never
    // stored). With kCluster = 2 this CTA issues its boxes into both CTAs.
    __device__ __forceinline__ static void issueTokenBoxes(const CUtensorMap* tmap_b, const CUtensorMap* tmap_b_full,
                                                           const Shared& sh, int stage, const Item& item, int npad,
                                                           int kb, uint64_t policy) {
        uint8_t* b = sh.base + L::kBOffset + stage * L::kBBytes;
        const CUtensorMap* tmap = fullBoxes(npad) ? tmap_b_full : tmap_b;
        const int rows = tokenBoxRows(npad);
        for (int box = sh.rank; box < tokenBoxes(npad); box += kCluster) {
            if constexpr (kCluster == 1) {
                sm90::tmaLoad2d(b + box * rows * kRowBytes, tmap, &sh.full[stage], kb * kBlockK,
                                item.slot_base + box * rows, policy);
            } else {
                sm90::tmaLoad2dMulticast(b + box * rows * kRowBytes, tmap, &sh.full[stage], kb * kBlockK,
                                         item.slot_base + box * rows, static_cast<uint16_t>((1u << kCluster) - 1),
                                         policy);
            }
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
                                                       int ptid) {
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
                sm90::cpAsync16(b_addr + row * kRowBytes + ((chunk ^ (row & 7)) << 4), src, valid);
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
                uint64_t* const stamp = args.trace != nullptr && blockIdx.x < static_cast<unsigned>(kMoeTraceMaxCtas)
                                            ? args.trace + blockIdx.x * kMoeTraceSlots + kTraceGatherFirst
                                            : nullptr;
                gatherSlotsByWarps<kGatherVectors, kGatherRows>(args.gather_x, args.slot_token, args.gather_out, args.k,
                                                                sh.slots, sh.rows, args.gathered, consumerGatherSlots(),
                                                                INT_MAX, gather_warps, (ptid >> 5) - 1, stamp);
            }
            if (ptid == 96 && args.h_ready != nullptr) {
                countItemsDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, args.h_ready);
            }
            if (ptid >= 32 && (args.gather_x != nullptr || args.h_ready != nullptr)) {
                return;
            }
        }
        const uint64_t token_policy = sm90::policyEvictLast();
        int prefetched = 0;
        if (ptid == 0) {
            traceNow(args, kTraceFirstLoad);
        }
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
            sm90::launchDependents();
            if (ptid == 0) {
                traceNow(args, kTraceDependency);
            }
        }
        if (kTmaTokens && ptid != 0) {
            return;  // one thread issues every copy
        }
        [[maybe_unused]] int ready_expert = -1;
        int iter = 0;
        int next = 0;
        int it = sh.item_begin;
        // n: the CTA's n-th item (dynamic scheduling hands each to the consumers, and with CTA pairs rank 0's
        // number to rank 1).
        for (int n = 0;; ++n) {
            if (n > 0) {
                if (!sh.dynamic) {
                    it += sh.item_stride;
                } else if (sh.rank == 0) {
                    it = next;
                    if constexpr (kCluster > 1) {
                        sendPairItem(sh, n, it);
                    }
                } else {
                    it = receivePairItem(sh, n);
                }
            }
            if (sh.dynamic) {
                publishItem(sh, n, it < total_items ? it : -1);
                if (it >= total_items) {
                    if (sh.rank == 0) {
                        finishTaking(args);
                    }
                    break;
                }
                if (sh.rank == 0) {
                    // In flight while this item's copies are issued.
                    next = sh.item_stride + atomicAdd(args.schedule, 1);
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
                    waitBar(&sh.empty[stage], phase ^ 1);
                    if (ptid == 0) {
                        issueWeights(tmap, args, sh, stage, item, kb, policy);
                    }
                }
                if constexpr (kTmaTokens) {
                    if constexpr (kGateUp) {
                        // The item's expert's rows of x_sorted are written (once per run of items of one expert).
                        // NOTE: rows = experts (no fused routing for the token-TMA shapes): row e is expert e.
                        if (kb == 0 && args.gathered != nullptr && item.expert != ready_expert) {
                            waitExpertRows(args.gathered, item.expert,
                                           sh.slots[item.expert + 1] - sh.slots[item.expert]);
                            if (ready_expert < 0) {
                                traceNow(args, kTraceRowsReady);
                            }
                            ready_expert = item.expert;
                        }
                    }
                    if constexpr (!kGateUp) {
                        if (kb == 0 && args.h_ready != nullptr && item.expert != ready_expert) {
                            waitExpertReady(
                                args.h_ready, item.expert,
                                args.h_ready_items_per_tile * (sh.tiles[item.expert + 1] - sh.tiles[item.expert]));
                            ready_expert = item.expert;
                        }
                    }
                    if constexpr (!kDiagSkipTokens) {
                        issueTokenBoxes(tmap_b, tmap_b_full, sh, stage, item, npad, kb, token_policy);
                    }
                } else {
                    if constexpr (!kDiagSkipTokens) {
                        issueTokens(args, sh, stage, offsets, npad, kb, ptid);
                    }
                    sm90::cpAsyncArriveNoinc(&sh.full[stage]);
                }
            }
        }
        if constexpr (kTmaTokens) {
            int32_t* counts = kGateUp ? args.gathered : args.h_ready;
            if (counts != nullptr) {
                releaseExpertCounts(counts, kGateUp ? args.gathered_exit : args.h_ready_exit, args.num_experts);
            }
        }
        if (ptid == 0) {
            traceNow(args, kTraceProducerDone);
        }
    }

    // 16-byte vectors of a row each lane of a gathering warp holds at once: the producer of the register-rebalanced
    // shapes has 72 registers.
    static constexpr int kGatherVectors = L::kRebalanceRegs ? 4 : 8;
    static constexpr int kGatherRows = (L::kRebalanceRegs || L::kStreamsBesideGather) ? 1 : 2;
    // The first slots, one per consumer warp of the grid, are copied by the consumer warps before their first stage
    // (they would wait for it anyway): each warp's first row costs several times a later one (measured at T = 1024:
    // about 6 us against 1.4), so more warps in the first pass complete the first items' experts sooner.
    __device__ __forceinline__ static int consumerGatherSlots() {
        return static_cast<int>(gridDim.x) * kConsumers * (kWarpgroup / 32);
    }

    // Writes the item's outputs from the accumulator through the consumer's staging buffer, 64 tokens a pass.
    template <int N>
    __device__ __forceinline__ static void epilogue(float (&acc)[N / 2], const GroupedGemmArgs& args, const Shared& sh,
                                                    const Item& item, int wg, int block, int ctid) {
        const int warp = ctid >> 5;
        const int lane = ctid & 31;
        uint16_t* stg = reinterpret_cast<uint16_t*>(sh.base + L::kEpiOffset + wg * L::kEpiBytes);
        constexpr int kChunk = N < L::kEpiTokens ? N : L::kEpiTokens;
        constexpr int kStride = L::kEpiStride;
        constexpr int kVecPerRow = L::kEpiCols / 8;
        const int col0 = kGateUp ? item.n_tile * 32 * L::kBlocks + 32 * block
                                 : item.n_tile * kWeightRowsPerConsumer * L::kBlocks + 64 * block;
        // The staging buffer is [token][output column] (kStride bf16 per token); the accumulator is [weight row]
        // [token], so each 8 x 8 fragment goes in transposed by stmatrix: the row address of lane l is token
        // 8 jj + l % 8 of the pass, at the warp's columns (gate-up: 8 intermediate columns; down: 16 hidden rows,
        // the second 8 from lanes 8-15).
        const uint32_t stg_addr =
            sm90::smemAddr(stg) + 2 * ((lane & 7) * kStride + (kGateUp ? 8 * warp : 16 * warp + 8 * ((lane >> 3) & 1)));
        // N = 160, 192 … (paddedTokens): the last pass may have fewer than kChunk columns of the accumulator.
        constexpr int kPasses = (N + kChunk - 1) / kChunk;
#pragma unroll
        for (int ch = 0; ch < kPasses; ++ch) {
            sm90::namedBarrierSync(1 + wg, kWarpgroup);  // the previous pass has read the staging buffer
#pragma unroll
            for (int jj = 0; jj < kChunk / 8; ++jj) {
                const int j = ch * (kChunk / 8) + jj;
                if (j >= N / 8) {
                    break;  // resolved at compile time: both are constants once unrolled
                }
                const uint32_t addr = stg_addr + 2 * (8 * jj * kStride);
                if constexpr (kGateUp) {
                    // Thread: gate rows of intermediate column 8 warp + lane / 4 in acc[4j], acc[4j + 1] (tokens
                    // 8j + 2 (lane % 4) and +1), the matching up rows in acc[4j + 2], acc[4j + 3].
                    sm90::stmatrixTrans(
                        addr, packBf16x2(silu(acc[4 * j]) * acc[4 * j + 2], silu(acc[4 * j + 1]) * acc[4 * j + 3]));
                } else {
                    // NOTE: "+ 0.0f" keeps ptxas from serializing the wgmma pipeline (C7514) over plain
                    // conversions of accumulator registers; it is not folded (-0 + 0 = +0).
                    sm90::stmatrixTrans(addr, packBf16x2(acc[4 * j] + 0.0f, acc[4 * j + 1] + 0.0f),
                                        packBf16x2(acc[4 * j + 2] + 0.0f, acc[4 * j + 3] + 0.0f));
                }
            }
            sm90::namedBarrierSync(1 + wg, kWarpgroup);
            const int rows = min(kChunk, item.ntok - ch * kChunk);
            // NOTE: not unrolled: the kernels run from a smaller code footprint. Unrolled (nvcc's default here) the
            // wide288 kernels were 3 % slower at T = 4096 (docs/cuda-moe-notes.md, v11).
#pragma unroll 1
            for (int idx = ctid; idx < rows * kVecPerRow; idx += kWarpgroup) {
                const int r = idx / kVecPerRow;
                const int v = idx - r * kVecPerRow;
                const uint4 val = *reinterpret_cast<const uint4*>(stg + r * kStride + v * 8);
                const int64_t slot = item.slot_base + ch * kChunk + r;
                *reinterpret_cast<uint4*>(args.out + slot * args.out_ld + col0 + v * 8) = val;
            }
        }
    }

    template <int N>
    __device__ __forceinline__ static void consumeItem(const GroupedGemmArgs& args, const Shared& sh, const Item& item,
                                                       int k_blocks, int& iter, int wg, int ctid) {
        float acc[kMBlocks][N / 2];
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
            for (int i = 0; i < N / 2; ++i) {
                acc[mb][i] = 0.0f;
            }
        }
        int prev_stage = 0;
        for (int kb = 0; kb < k_blocks; ++kb, ++iter) {
            const int stage = iter % kStages;
            const uint32_t phase = (iter / kStages) & 1;
            waitBar(&sh.full[stage], phase);
            if (iter == 0 && wg == 0 && ctid == 0) {
                traceNow(args, kTraceFirstData);
            }
            if constexpr (!kTmaTokens) {
                sm90::fenceProxyAsyncShared();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
            }
            const uint64_t desc_a = sm90::makeSmemDesc(sh.base + L::kAOffset + stage * L::kABytes +
                                                       wg * kMBlocks * kWeightRowsPerConsumer * kRowBytes);
            const uint64_t desc_b = sm90::makeSmemDesc(sh.base + L::kBOffset + stage * L::kBBytes);
#pragma unroll
            for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
                for (int i = 0; i < N / 2; ++i) {
                    sm90::fenceOperand(acc[mb][i]);
                }
            }
            sm90::wgmmaFence();
#pragma unroll
            for (int kk = 0; kk < kBlockK / 16; ++kk) {
#pragma unroll
                for (int mb = 0; mb < kMBlocks; ++mb) {
                    // +32 bytes of K per step = +2 in the descriptor's 16-byte address units; +8 KB per block.
                    if constexpr (!kDiagSkipMma) {
                        sm90::wgmmaColumns<N>(acc[mb],
                                              desc_a + 2 * kk + mb * ((kWeightRowsPerConsumer * kRowBytes) >> 4),
                                              desc_b + 2 * kk, (kb > 0 || kk > 0) ? 1 : 0);
                    }
                }
            }
            sm90::wgmmaCommit();
#pragma unroll
            for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
                for (int i = 0; i < N / 2; ++i) {
                    sm90::fenceOperand(acc[mb][i]);
                }
            }
            if (args.release_early) {
                // Memory-bound tiles: the stage goes back to the producer as soon as its wgmma retire, one stage
                // sooner than below, at the cost of not overlapping two stages' wgmma.
                sm90::wgmmaWait<0>();
                releaseStage(sh, stage, ctid);
            } else if (kb > 0) {
                sm90::wgmmaWait<1>();  // the previous stage's wgmma have retired
                releaseStage(sh, prev_stage, ctid);
            }
            prev_stage = stage;
        }
        sm90::wgmmaWait<0>();
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
            for (int i = 0; i < N / 2; ++i) {
                sm90::fenceOperand(acc[mb][i]);
            }
        }
        if (!args.release_early) {
            releaseStage(sh, prev_stage, ctid);
        }
        if (wg == 0 && ctid == 0) {
            traceNow(args, kTraceLastMma);
        }
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
            const int block = wg * kMBlocks + mb;
            epilogue<N>(acc[mb], args, sh, item, wg, block, ctid);
            if constexpr (!kGateUp) {
                if (args.combine.out != nullptr) {
                    fusedCombineArrive(args, sh.entry_slot, sh.weights, sh.tiles[sh.rows],
                                       item.n_tile * L::kBlocks + block, wg, ctid,
                                       reinterpret_cast<int*>(sh.base + L::kEpiOffset + wg * L::kEpiBytes));
                }
            }
        }
    }

    // Items of more than 128 tokens in tiles over 256: wgmma N is the next multiple of kWideStep (paddedTokens), one
    // instantiation each.
    template <int N>
    __device__ __forceinline__ static void consumeWide(int npad, const GroupedGemmArgs& args, const Shared& sh,
                                                       const Item& item, int k_blocks, int& iter, int wg, int ctid) {
        if (npad == N) {
            consumeItem<N>(args, sh, item, k_blocks, iter, wg, ctid);
        } else if constexpr (N < kBlockTokens) {  // the widths step by kWideStep up to kBlockTokens, the last step less
            consumeWide<(N + kWideStep < kBlockTokens ? N + kWideStep : kBlockTokens)>(npad, args, sh, item, k_blocks,
                                                                                       iter, wg, ctid);
        } else {
            sm90::trapOutOfLine();  // an item no consumer takes would leave the producer waiting forever
        }
    }

    // The consumer thread's wgmma reading `stage` have retired: release it to the producer (of both CTAs).
    __device__ __forceinline__ static void releaseStage(const Shared& sh, int stage, int ctid) {
        if constexpr (kCluster == 1) {
            sm90::mbarArrive(&sh.empty[stage]);
        } else if ((ctid & 31) == 0) {
#pragma unroll
            for (int r = 0; r < kCluster; ++r) {
                sm90::mbarArriveCluster(&sh.empty[stage], static_cast<uint32_t>(r));
            }
        }
    }

    __device__ static void consume(const GroupedGemmArgs& args, const Shared& sh, int total_items, int k_blocks,
                                   int wg) {
        const int ctid = threadIdx.x - kWarpgroup * (wg + 1);
        int consumed = 0;
        if constexpr (!kGateUp) {
            if (args.combine.out != nullptr && sh.tiles[sh.rows] == 0 && blockIdx.x == 0 && wg == 0) {
                // No entry is served here: no arrival will combine, and the layer's output is zero.
                const int64_t vectors = static_cast<int64_t>(args.combine.num_tokens) * args.out_ld / 8;
                for (int64_t v = ctid; v < vectors; v += kWarpgroup) {
                    reinterpret_cast<uint4*>(args.combine.out)[v] = make_uint4(0, 0, 0, 0);
                }
            }
        }
        if constexpr (kGateUp && kTmaTokens) {
            if (args.gather_x != nullptr) {
                gatherSlotsByWarps<8, 1>(args.gather_x, args.slot_token, args.gather_out, args.k, sh.slots, sh.rows,
                                         args.gathered, 0, consumerGatherSlots(), kConsumers * (kWarpgroup / 32),
                                         wg * (kWarpgroup / 32) + (ctid >> 5), nullptr);
            }
        }
        int iter = 0;
        int taken = 0;
        [[maybe_unused]] int posted = 0;
        for (int it = sh.dynamic ? takeItem(sh, taken++) : sh.item_begin; it >= 0 && it < total_items;
             it = sh.dynamic ? takeItem(sh, taken++) : it + sh.item_stride) {
            const Item item = itemAt(it, args, sh);
            if (wg == 0 && ctid == 0) {
                trace(args, kTraceItems, static_cast<uint64_t>(++consumed));
            }
            // No code for widths paddedTokens never returns (below kMinPaddedTokens, above kBlockTokens).
            constexpr int kMinN = kMinPaddedTokens<kBlockTokens>;
            switch (paddedTokens<kBlockTokens>(item.ntok)) {
                case 8:
                    if constexpr (kMinN <= 8) consumeItem<8>(args, sh, item, k_blocks, iter, wg, ctid);
                    break;
                case 16:
                    if constexpr (kBlockTokens >= 16 && kMinN <= 16) {
                        consumeItem<16>(args, sh, item, k_blocks, iter, wg, ctid);
                    }
                    break;
                case 32:
                    if constexpr (kBlockTokens >= 32 && kMinN <= 32) {
                        consumeItem<32>(args, sh, item, k_blocks, iter, wg, ctid);
                    }
                    break;
                case 64:
                    if constexpr (kBlockTokens >= 64 && kMinN <= 64) {
                        consumeItem<64>(args, sh, item, k_blocks, iter, wg, ctid);
                    }
                    break;
                case 128:
                    if constexpr (kBlockTokens >= 128) consumeItem<128>(args, sh, item, k_blocks, iter, wg, ctid);
                    break;
                default:
                    // 256, or 160, 192 … kBlockTokens in tiles over 256 tokens (paddedTokens)
                    if constexpr (kBlockTokens > 256) {
                        consumeWide<128 + kWideStep>(paddedTokens<kBlockTokens>(item.ntok), args, sh, item, k_blocks,
                                                     iter, wg, ctid);
                    } else if constexpr (kBlockTokens == 256) {
                        consumeItem<256>(args, sh, item, k_blocks, iter, wg, ctid);
                    }
                    break;
            }
            if constexpr (kGateUp && kTmaTokens) {
                if (args.h_ready != nullptr) {  // this item's h rows are stored
                    postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted++, item.expert, wg, ctid, 1 + wg);
                }
            }
        }
        if constexpr (kGateUp && kTmaTokens) {
            if (args.h_ready != nullptr) {  // no more items: the counting thread returns
                postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted, -1, wg, ctid, 1 + wg);
            }
        }
        if (wg == 0 && ctid == 0) {
            traceNow(args, kTraceEnd);
        }
    }
};

// The kernel's body; tmap, tmap_b and tmap_b_full point at the kernel's __grid_constant__ parameters.
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
__device__ __forceinline__ void groupedGemm(const CUtensorMap* tmap, const CUtensorMap* tmap_b,
                                            const CUtensorMap* tmap_b_full, const GroupedGemmArgs& args) {
    using K = Kernel<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;
    using L = typename K::L;
    extern __shared__ uint8_t smem_raw[];
    if (threadIdx.x == 0) {
        K::traceNow(args, kTraceEntry);
    }
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
    sh.rank = 0;
    if constexpr (kCluster > 1) {
        sh.rank = static_cast<int>(sm90::clusterCtaRank());
    }
    sh.item_begin = static_cast<int>(blockIdx.x) / kCluster;
    sh.item_stride = static_cast<int>(gridDim.x) / kCluster;
    sh.dynamic = kTmaTokens && args.schedule != nullptr;
    sh.item_full = reinterpret_cast<uint64_t*>(base + L::kItemBarOffset);
    sh.item_empty = sh.item_full + L::kItemSlots;
    sh.item_ring = reinterpret_cast<int*>(base + L::kItemRingOffset);
    sh.pair_full = reinterpret_cast<uint64_t*>(base + L::kPairBarOffset);
    sh.pair_empty = sh.pair_full + L::kItemSlots;
    sh.pair_ring = reinterpret_cast<int*>(base + L::kPairRingOffset);
    sh.done.full = reinterpret_cast<uint64_t*>(base + L::kDoneBarOffset);
    sh.done.empty = sh.done.full + L::kItemSlots;
    sh.done.ring = reinterpret_cast<int*>(base + L::kDoneRingOffset);

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
            sm90::mbarInit(&sh.pair_full[s], 1);
            sm90::mbarInit(&sh.pair_empty[s], 1);
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
    if (!wait_in_roles) {
        // Reads the permute stage's offsets (or the routing) and the previous layer's x: wait for the previous
        // kernel.
        sm90::gridDependencyWait();
        sm90::launchDependents();
        if (threadIdx.x == 0) {
            K::traceNow(args, kTraceDependency);
        }
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
        int* s_slot_token = s_ids + kFusedRoutingEntries;
        int* s_counts = s_slot_token + kFusedRoutingEntries;
        if (args.fused_entries <= kWarpRoutingEntries) {
            // s_ids holds the compact rows' experts [0, 32), the entries' slots [32, 64) and weights [64, 96).
            static_assert(3 * kWarpRoutingEntries <= kFusedRoutingEntries, "one-warp routing scratch");
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
    if constexpr (kCluster > 1) {
        sm90::clusterSync();  // the peer's barriers are initialised before any multicast or remote arrival
    }
    if (threadIdx.x == 0) {
        K::traceNow(args, kTraceSetup);
    }
    const int total_items = tiles[sh.rows] * (args.n_tiles / kCluster);
    const int k_blocks = (args.k + kBlockK - 1) / kBlockK;
    const int warpgroup = threadIdx.x / kWarpgroup;
    // NOTE: setmaxnreg only for tiles over 256 tokens (Layout::kRebalanceRegs): the uniform 168-register budget of
    // 384 threads holds the 128 accumulators of a 64 x 256 tile, and a 56-register producer spilled in its address
    // arithmetic.
    if (warpgroup == 0) {
        if constexpr (L::kRebalanceRegs) {
            sm90::setMaxRegsDec<L::kProducerRegs>();
        }
        K::produce(tmap, tmap_b, tmap_b_full, args, sh, total_items, k_blocks);
    } else {
        if constexpr (L::kRebalanceRegs) {
            sm90::setMaxRegsInc<L::kConsumerRegs>();
        }
        if (consumers_wait) {
            sm90::gridDependencyWait();
            sm90::launchDependents();
        }
        K::consume(args, sh, total_items, k_blocks, warpgroup - 1);
    }
    if constexpr (kCluster > 1) {
        sm90::clusterSync();  // no CTA leaves while its peer may still arrive on its barriers
    }
}

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
__global__ void __launch_bounds__(
    kWarpgroup*(kConsumers + 1),
    Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>::kMinCtasPerSm)
    groupedGemmKernel(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap tmap_b,
                      const __grid_constant__ CUtensorMap tmap_b_full, const GroupedGemmArgs args) {
    groupedGemm<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>(&tmap, &tmap_b,
                                                                                            &tmap_b_full, args);
}

// The same kernel with its registers capped at Layout::kBesideGatherRegs instead of the launch bounds' whole register
// file, for the gate-up kernels that stream beside the gather (Layout::kStreamsBesideGather; nvcc takes one of the
// two qualifiers per kernel).
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
__global__ void __maxnreg__(
    (Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>::kBesideGatherRegs))
    groupedGemmKernelBesideGather(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap tmap_b,
                                  const __grid_constant__ CUtensorMap tmap_b_full, const GroupedGemmArgs args) {
    groupedGemm<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>(&tmap, &tmap_b,
                                                                                            &tmap_b_full, args);
}

}  // namespace afd::kernels::cuda::grouped_gemm
