// The consumer warpgroups of a grouped GEMM CTA (moe_grouped_gemm.cuh): each owns kMBlocks blocks of 64 weight rows,
// runs the wgmma chain of every item over the ring of stages, releases each stage as its wgmma retire, and writes the
// item's outputs (SwiGLU in the gate-up epilogue) through its staging buffer; in the gate-up kernels that gather x
// themselves they first copy the first slots of x_sorted.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/moe_expert_ready.cuh"
#include "kernels/cuda/moe_fused_combine.cuh"
#include "kernels/cuda/moe_gemm_kernel_common.cuh"
#include "kernels/cuda/moe_gemm_tiles.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_slot_gather.cuh"
#include "kernels/cuda/sm90_ptx.cuh"
#include "kernels/cuda/sm90_wgmma.cuh"

namespace afd::kernels::cuda::grouped_gemm {

template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
struct Consumer : KernelCommon<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens> {
    using Base = KernelCommon<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    using L = typename Base::L;
    using Shared = typename Base::Shared;
    using Base::consumerGatherSlots;
    using Base::itemAt;
    using Base::takeItem;
    using Base::waitBar;

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
            // wide288 kernels were 3 % slower at T = 4096.
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
                    sm90::wgmmaColumns<N>(acc[mb], desc_a + 2 * kk + mb * ((kWeightRowsPerConsumer * kRowBytes) >> 4),
                                          desc_b + 2 * kk, (kb > 0 || kk > 0) ? 1 : 0);
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

    // The consumer thread's wgmma reading `stage` have retired: release it to the producer. NOTE: ctid is unused;
    // without the parameter nvcc schedules two register moves of the tiny8 kernels in the other order.
    __device__ __forceinline__ static void releaseStage(const Shared& sh, int stage, [[maybe_unused]] int ctid) {
        sm90::mbarArrive(&sh.empty[stage]);
    }

    __device__ static void consume(const GroupedGemmArgs& args, const Shared& sh, int total_items, int k_blocks,
                                   int wg) {
        const int ctid = threadIdx.x - kWarpgroup * (wg + 1);
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
                if (args.permute_ready != nullptr) {
                    sm90::waitAtLeastAcquire(args.permute_ready + 1, args.permute_ready_ctas);  // slot_token
                }
                gatherSlotsByWarps<8, 1>(args.gather_x, args.slot_token, args.gather_out, args.k, sh.slots, sh.rows,
                                         args.gathered, 0, consumerGatherSlots(), kConsumers * (kWarpgroup / 32),
                                         wg * (kWarpgroup / 32) + (ctid >> 5));
            }
        }
        int iter = 0;
        int taken = 0;
        [[maybe_unused]] int posted = 0;
        for (int it = sh.dynamic ? takeItem(sh, taken++) : sh.item_begin; it >= 0 && it < total_items;
             it = sh.dynamic ? takeItem(sh, taken++) : it + sh.item_stride) {
            const Item item = itemAt(it, args, sh);
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
                case 96:
                    if constexpr (kBlockTokens == 128) consumeItem<96>(args, sh, item, k_blocks, iter, wg, ctid);
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
            if constexpr (Base::kCountsHReady) {
                if (args.h_ready != nullptr) {  // this item's h rows are stored
                    postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted++, item.expert, wg, ctid, 1 + wg);
                }
            }
            if constexpr (Base::kCombinesByPart) {
                if (args.part_done != nullptr) {  // this item's y rows are stored
                    postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted++, item.n_tile, wg, ctid, 1 + wg);
                }
            }
        }
        if constexpr (Base::kCountsHReady) {
            if (args.h_ready != nullptr) {  // no more items: the counting thread returns
                postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted, -1, wg, ctid, 1 + wg);
            }
        }
        if constexpr (Base::kCombinesByPart) {
            if (args.part_done != nullptr) {
                postItemDone<L::kItemSlots, L::kRebalanceRegs>(sh.done, posted, -1, wg, ctid, 1 + wg);
            }
        }
    }
};

}  // namespace afd::kernels::cuda::grouped_gemm
