// What the two roles of a grouped GEMM CTA (moe_gemm_producer.cuh, moe_gemm_consumer.cuh; the kernels in
// moe_grouped_gemm.cuh) share: the CTA's shared-memory pointers, its bounded barrier waits, the timeline stamps, the
// rings that hand item numbers from the producer to the consumers (and between the CTAs of a pair), and the decoding
// of an item number into (expert, weight tile, token tile).
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_expert_ready.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
struct KernelCommon {
    using L = Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;
    // The down kernels that may count their items per part for the combine by part (GroupedGemmArgs::part_done).
    static constexpr bool kCombinesByPart = !kGateUp && (kTmaTokens || L::kTall128Gather) && kCluster == 1;
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
        sm90::mbarWaitBounded<false, L::kRebalanceRegs>(bar, parity);
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
        if constexpr (kCombinesByPart) {
            if (args.part_done != nullptr) {
                return decodeItemTileMajor<kBlockTokens>(it, sh.tiles, sh.slots, sh.experts, sh.rows);
            }
        }
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

    // The first slots, one per consumer warp of the grid, are copied by the consumer warps before their first stage
    // (they would wait for it anyway): at the start a warp's group of rows takes about 5.5 us to load, store and
    // release, while the first weight stages of every CTA fill the memory system, against 1.4 us per row later
    // (T = 1024; docs/cuda-moe-notes.md v17, v18), so more warps in the first pass complete the first items' experts
    // sooner.
    __device__ __forceinline__ static int consumerGatherSlots() {
        return static_cast<int>(gridDim.x) * kConsumers * (kWarpgroup / 32);
    }
};

}  // namespace afd::kernels::cuda::grouped_gemm
