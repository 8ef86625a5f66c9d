// Geometry of the grouped expert GEMMs (moe_grouped_gemm.cuh): the shared-memory layout of one CTA, the work items
// of the expert-major list and how an item number decodes into one (and the L2 policy of its weight copies), and the
// small conversions of the epilogue.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_token_tiles.cuh"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

inline constexpr int kBlockK = 64;  // reduction elements per stage: one 128-byte swizzle row of bf16
inline constexpr int kRowBytes = 128;
inline constexpr int kWarpgroup = 128;  // threads
inline constexpr int kWeightRowsPerConsumer = 64;

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
struct Layout {
    static constexpr int kBlocks = kConsumers * kMBlocks;                         // 64-row blocks per item
    static constexpr int kABytes = kBlocks * kWeightRowsPerConsumer * kRowBytes;  // per stage
    static constexpr int kBBytes = kBlockTokens * kRowBytes;                      // per stage
    // Tokens per epilogue pass: 32 for tiles over 256 tokens, whose four stages leave room for no more staging
    // (48-token passes in the gate-up kernel measured slower).
    static constexpr int kEpiTokens = kBlockTokens < 64 ? kBlockTokens : (kBlockTokens > 256 ? 32 : 64);
    static constexpr int kEpiCols = kGateUp ? 32 : 64;  // outputs per token and consumer
    static constexpr int kEpiStride = kEpiCols + 8;     // bf16; the pad makes the staging stores conflict-free
    static constexpr int kEpiBytes = kEpiTokens * kEpiStride * 2;
    static constexpr int kAOffset = 0;
    static constexpr int kBOffset = kAOffset + kStages * kABytes;
    static constexpr int kEpiOffset = kBOffset + kStages * kBBytes;
    static constexpr int kBarOffset = kEpiOffset + kConsumers * kEpiBytes;
    // Dynamic scheduling: the producer hands each item it takes to the consumers through a ring of kItemSlots
    // (full/empty barrier pairs, then the item numbers).
    static constexpr int kItemSlots = 4;
    static constexpr int kItemBarOffset = kBarOffset + 2 * kStages * 8;
    static constexpr int kItemRingOffset = kItemBarOffset + 2 * kItemSlots * 8;
    // NOTE: 2 kItemSlots barriers and 16 bytes that nothing uses follow the ring (the kernel initialises the barriers):
    // the gap keeps every later offset, and so the kernels' machine code, as it was measured.
    static constexpr int kSpareBarOffset = kItemRingOffset + kItemSlots * 8;
    // The gate-up items done, posted by the consumers to the thread that counts them (moe_expert_ready.cuh): full and
    // empty barriers, then the experts.
    static constexpr int kDoneBarOffset = kSpareBarOffset + 2 * kItemSlots * 8 + 16;
    static constexpr int kDoneRingOffset = kDoneBarOffset + 2 * kItemSlots * 8;
    static constexpr int kPrefixOffset = kDoneRingOffset + kItemSlots * 4;
    // tall128g (isTall128Gather in kernels/moe_cuda_plan.h): the cp.async shape whose 128 producer threads take every
    // item from the item ring too, and whose producer thread 0 counts finished items between its copies.
    static constexpr bool kTall128Gather = !kTmaTokens && kConsumers == 2 && kMBlocks == 2;
    // Threads that read each handed-over item: the consumers, and in tall128g the 128 producer threads (thread 0
    // publishes each item, then reads it as the others do; the token-TMA producer's single thread takes them).
    static constexpr int kItemReaders = kConsumers * kWarpgroup + (kTall128Gather ? kWarpgroup : 0);
    // After the prefixes [2 (E + 1)]: fused-routing scratch, ids and slot tokens [kMoeFusedRoutingEntries] each,
    // counts [E].
    static constexpr int kThreads = kWarpgroup * (kConsumers + 1);
    static constexpr int kRowsPerThread = kBlockTokens >= 16 ? kBlockTokens / 16 : 1;  // cp.async token rows
    // Rows of one token TMA box, and whether a full token tile goes in one box (TMA boxes have at most 256 rows).
    // Tiles over 256 tokens load boxes of 96 rows, which divide 288 (64-row boxes for their items of up to 256 tokens
    // measured slower).
    static constexpr int kTokenBoxRows = kBlockTokens < 64 ? kBlockTokens : (kBlockTokens > 256 ? 96 : 64);
    static constexpr bool kFullTokenBox = kBlockTokens <= 256;
    // Tiles over 256 tokens hold more than 128 accumulators per consumer thread: the producer warpgroup gives
    // registers to the consumers (setmaxnreg): 384 threads launch with 168 each, the producer keeps kProducerRegs.
    static constexpr bool kRebalanceRegs = kBlockTokens > 256;
    static constexpr int kProducerRegs = 72;
    static constexpr int kConsumerRegs = 216;  // (168 * 384 - 72 * 128) / 256
    static_assert(kBOffset % 1024 == 0 && kEpiOffset % 1024 == 0, "stages must stay 1024-byte aligned");
    static_assert(kEpiBytes % 16 == 0 && kBarOffset % 8 == 0, "staging and barriers alignment");
    static_assert(kItemRingOffset + kItemSlots * 4 <= kDoneBarOffset && kDoneBarOffset % 8 == 0, "item ring");
    static_assert(kBlocks * kWeightRowsPerConsumer <= 256, "a weight TMA box has <= 256 rows");
    static_assert(kFullTokenBox || kBlockTokens % kTokenBoxRows == 0,
                  "token tiles over 256 rows load whole boxes of kTokenBoxRows");
    static_assert(!kRebalanceRegs || (kConsumers == 2 && kProducerRegs + 2 * kConsumerRegs <= 3 * 168),
                  "register rebalancing assumes 384 threads of 168 registers");
    // CTAs per SM the registers must allow: the 8-token pipeline (51 KB of shared memory in the down kernel) runs up
    // to four, the other one-consumer shapes two.
    static constexpr int kMinCtasPerSm = kConsumers > 1 ? 1 : (kBlockTokens == 8 ? 4 : 2);
    // The gate-up kernel of the 128-token TMA tile issues its first weight copies before it waits for the gather
    // kernel (GroupedGemmArgs::prefetch_before_wait). For its CTAs to be resident beside the gather's (one 256-thread
    // CTA of 54 registers per SM), the 384 threads keep to 128 registers, not the whole register file.
    static constexpr bool kStreamsBesideGather = kGateUp && kTmaTokens && kMBlocks == 1 && kBlockTokens <= 128;
    static constexpr int kBesideGatherRegs = 128;
    // Arrivals that release a stage: every consumer thread.
    static constexpr int kEmptyArrivals = kConsumers * kWarpgroup;

    // Dynamic shared memory: 1024 bytes of alignment slack + the fixed part + prefixes + fused-routing scratch (the
    // cp.async token shapes only: the fused routing is theirs).
    static constexpr size_t scratchBytes(int num_experts) {
        return kTmaTokens ? 0
                          : (2 * static_cast<size_t>(kMoeFusedRoutingEntries) + static_cast<size_t>(num_experts)) * 4;
    }
    static constexpr size_t bytes(int num_experts) {
        return 1024 + static_cast<size_t>(kPrefixOffset) + 2 * static_cast<size_t>(num_experts + 1) * 4 +
               scratchBytes(num_experts);
    }
    static_assert(bytes(kMoeMaxExperts) <= 227 * 1024, "shared memory per CTA");
};

struct Item {
    int expert;
    int n_tile;        // weight-row tile within the expert
    int slot_base;     // first slot of the token tile
    int ntok;          // tokens in the tile, 1..kBlockTokens
    int expert_tiles;  // token tiles of the expert
};

// The largest row r of tiles[0 .. rows) whose first item tiles[r] * scale is <= value; it cannot be an empty row (its
// successor would qualify).
__device__ __forceinline__ int rowAtOrBelow(const int* tiles, int rows, int value, int scale) {
    int lo = 0;
    int hi = rows - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (tiles[mid] * scale <= value) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// The item of row `row`'s weight tile n and token tile m (of its m_tiles).
template <int kBlockTokens>
__device__ __forceinline__ Item rowItem(int row, int n, int m, int m_tiles, const int* slots, const int* experts) {
    const int count = slots[row + 1] - slots[row];
    Item item;
    item.expert = experts != nullptr ? experts[row] : row;
    item.n_tile = n;
    int first = 0;
    expertTokenTile(count, m_tiles, m, multiTileTokens(kBlockTokens), &first, &item.ntok);
    item.slot_base = slots[row] + first;
    item.expert_tiles = m_tiles;
    return item;
}

// Item `it` of the expert-major list. tiles/slots [rows + 1] are the shared-memory copies of tile_offset /
// slot_offset (rows = E, experts = null), or the compact rows of fusedRoutingWarp (row r is expert experts[r]).
template <int kBlockTokens>
__device__ __forceinline__ Item decodeItem(int it, const int* tiles, const int* slots, const int* experts, int rows,
                                           int n_tiles) {
    const int lo = rowAtOrBelow(tiles, rows, it, n_tiles);
    const int local = it - tiles[lo] * n_tiles;
    const int m_tiles = tiles[lo + 1] - tiles[lo];
    const int n = local / m_tiles;
    return rowItem<kBlockTokens>(lo, n, local - n * m_tiles, m_tiles, slots, experts);
}

// Item `it` of the weight-tile-major list (GroupedGemmArgs::part_done): every expert's token tiles of weight tile 0,
// then of tile 1 … The same arrays as decodeItem.
template <int kBlockTokens>
__device__ __forceinline__ Item decodeItemTileMajor(int it, const int* tiles, const int* slots, const int* experts,
                                                    int rows) {
    const int n = it / tiles[rows];
    const int tile = it - n * tiles[rows];
    const int lo = rowAtOrBelow(tiles, rows, tile, 1);
    const int m_tiles = tiles[lo + 1] - tiles[lo];
    return rowItem<kBlockTokens>(lo, n, tile - tiles[lo], m_tiles, slots, experts);
}

// L2 policy of an item's weight copies: evict_first when each weight tile is read by about one item
// (GroupedGemmArgs::weights_read_once), except, with weights_shared_per_item, for the items of an expert with several
// token tiles, whose other tiles' items read the same weights at about the same time: evict_last, so that the
// read-once stream (evict_first) passes them by (evict_normal measured 1.5 % slower at T = 1024 and 2-3 % at 2048 with
// zipf routing). When most weight tiles are read several times, evict_normal.
__device__ __forceinline__ uint64_t weightCachePolicy(const GroupedGemmArgs& args, const Item& item) {
    const bool first = args.weights_read_once && !(args.weights_shared_per_item && item.expert_tiles > 1);
    if (first) {
        return sm90::policyEvictFirst();
    }
    return args.weights_read_once ? sm90::policyEvictLast() : sm90::policyEvictNormal();
}

// Tiles over 256 tokens: the narrowest wgmma N they run, and the step of N above 128. Each N is one instantiation of
// the consumer (its wgmma chain and its epilogue); with N from 8 and steps of 16 the wide288 kernels were 3.5 %
// slower with zipf routing at T = 4096 than with these: the smaller code wins over the padded columns.
inline constexpr int kWideMinTokens = 64;
inline constexpr int kWideStep = 32;

// The narrowest wgmma N a tile configuration runs (paddedTokens); the consumer has no code for narrower ones.
template <int kBlockTokens>
inline constexpr int kMinPaddedTokens = kBlockTokens > 256 ? kWideMinTokens : 8;

// wgmma N for a tile of ntok tokens: the smallest of 8, 16, 32, 64, 128 that holds them (from kMinPaddedTokens),
// and in 128-token tiles 96 for 65-96 tokens (one m64n96 instruction): tall128's items are MMA-bound at N = 128 under
// the power cap (33 us per gate-up item, as long as a 1 MB weight stream), and T = 1024 uniform (64 +- 8 tokens per
// expert) ran 3 % faster with it; above 128 (tiles over 256 tokens) the next multiple of kWideStep, which the consumer
// runs as a 128- or 256-column instruction plus narrower ones (sm90::wgmmaColumns).
template <int kBlockTokens>
__device__ __forceinline__ int paddedTokens(int ntok) {
    if (kBlockTokens == 128 && ntok > 64 && ntok <= 96) {
        return 96;
    }
    if (kBlockTokens > 256 && ntok > 128) {
        return min(kBlockTokens, (ntok + kWideStep - 1) & ~(kWideStep - 1));
    }
    int n = kMinPaddedTokens<kBlockTokens>;
    while (n < ntok && n < kBlockTokens) {
        n *= 2;
    }
    return n;
}

// silu with the approximate divide: the epilogue of a 256-token gate-up item computes 128 of them per thread while
// the tensor cores wait. exp(-v) = inf for v < -88 gives -0, as the exact quotient rounds to in bf16.
__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.0f + __expf(-v)); }

// Two floats as bf16x2 (lo in the low half), round to nearest even.
__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
}

}  // namespace afd::kernels::cuda::grouped_gemm
