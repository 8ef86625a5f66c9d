// What the two roles of a grouped GEMM CTA (moe_gemm_producer.cuh, moe_gemm_consumer.cuh; the kernels in
// moe_grouped_gemm.cuh) share: the CTA's shared-memory pointers, its bounded barrier waits, the
// ring that hands item numbers from the producer to the consumers, and the decoding of an item number into (expert,
// weight tile, token tile).
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_expert_ready.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
struct KernelCommon {
    using L = Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    // The down kernels that may count their items per part for the combine by part (GroupedGemmArgs::part_done).
    static constexpr bool kCombinesByPart = !kGateUp && (kTmaTokens || L::kTall128Gather);
    // The gate-up kernels that may count their items per expert for the down kernel per expert (GroupedGemmArgs::
    // h_ready).
    static constexpr bool kCountsHReady = kGateUp && (kTmaTokens || L::kTall128Gather);

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
        int item_begin;         // first item of this CTA, and the stride
        int item_stride;
        bool dynamic;          // later items from args.schedule, handed over through the item ring
        uint64_t* item_full;   // [kItemSlots]
        uint64_t* item_empty;  // [kItemSlots]
        int* item_ring;        // [kItemSlots] item number, -1 = no more items
        ItemDoneRing done;     // gate-up with GroupedGemmArgs::h_ready: the items the consumers finished
    };

    // mbarWait, with the trap out of line where setmaxnreg raised the consumers' registers (mbarWaitColdTrap).
    __device__ __forceinline__ static void waitBar(uint64_t* bar, uint32_t parity) {
        sm90::mbarWaitBounded<L::kRebalanceRegs>(bar, parity);
    }

    // Dynamic scheduling (token-TMA shapes and tall128g: producer thread 0), producer side: hands item number `value`
    // (-1: none left) to the consumers (and in tall128g to the producer's threads) as the CTA's n-th item.
    __device__ __forceinline__ static void publishItem(const Shared& sh, int n, int value) {
        const int slot = n % L::kItemSlots;
        waitBar(&sh.item_empty[slot], ((n / L::kItemSlots) & 1) ^ 1);
        sh.item_ring[slot] = value;
        sm90::mbarArrive(&sh.item_full[slot]);  // release: the ring store is visible to the waiting consumers
    }
    // Reader side (every consumer thread, and in tall128g every producer thread): the CTA's n-th item number, -1 when
    // there is none.
    __device__ __forceinline__ static int takeItem(const Shared& sh, int n) {
        const int slot = n % L::kItemSlots;
        waitBar(&sh.item_full[slot], (n / L::kItemSlots) & 1);
        const int value = sh.item_ring[slot];
        sm90::mbarArrive(&sh.item_empty[slot]);
        return value;
    }
    // The producer has taken its last item: the CTA that completes the count
    // resets both counters, so that the next launch (a replay of this kernel alone included) starts from zero.
    // Every CTA has finished taking by then, and the next launch reads the counters only after this grid has
    // completed.
    __device__ __forceinline__ static void finishTaking(const GroupedGemmArgs& args) {
        if (atomicAdd(args.schedule + 1, 1) == static_cast<int>(gridDim.x) - 1) {
            args.schedule[0] = 0;
            args.schedule[1] = 0;
        }
    }

    // Item `it` of this CTA.
    __device__ __forceinline__ static Item itemAt(int it, const GroupedGemmArgs& args, const Shared& sh) {
        if constexpr (kCombinesByPart) {
            if (args.part_done != nullptr) {
                return decodeItemTileMajor<kBlockTokens>(it, sh.tiles, sh.slots, sh.experts, sh.rows);
            }
        }
        return decodeItem<kBlockTokens>(it, sh.tiles, sh.slots, sh.experts, sh.rows, args.n_tiles);
    }

    // Token TMA boxes of an item: one box of kBlockTokens rows (from tmap_b_full) when the padded count fills a tile
    // that fits one box (fewer TMA issues), else enough boxes of kTokenBoxRows for the padded count.
    __device__ __forceinline__ static bool fullBoxes(int npad) { return L::kFullTokenBox && npad == kBlockTokens; }
    __device__ __forceinline__ static int tokenBoxes(int npad) {
        return fullBoxes(npad) ? 1 : (npad + L::kTokenBoxRows - 1) / L::kTokenBoxRows;
    }
    __device__ __forceinline__ static int tokenBoxRows(int npad) {
        return fullBoxes(npad) ? kBlockTokens : L::kTokenBoxRows;
    }

    // The first slots, one per consumer warp of the grid, are copied by the consumer warps before their first stage
    // (they would wait for it anyway): at the start a warp's group of rows takes about 5.5 us to load, store and
    // release, while the first weight stages of every CTA fill the memory system, against 1.4 us per row later
    // (T = 1024), so more warps in the first pass complete the first items' experts
    // sooner.
    __device__ __forceinline__ static int consumerGatherSlots() {
        return static_cast<int>(gridDim.x) * kConsumers * (kWarpgroup / 32);
    }
};

}  // namespace afd::kernels::cuda::grouped_gemm
