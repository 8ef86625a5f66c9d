// Combine stage done by the down kernel for small batches (GroupedGemmArgs::combine), so that no third kernel
// (and its launch and dependency, a few microseconds at T = 1) follows the down GEMM. Every (expert, token tile)
// item writes each 64-row block of hidden rows of y once; the consumer whose arrival completes a block sums that
// block of out from y in entry order, in fp32, exactly as the combine kernel (moe_combine.cu) does.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/sm90_ptx.cuh"

namespace afd::kernels::cuda::grouped_gemm {

// out[t, h0 .. h0 + 64) = sum over t's served entries j of topk_weight * y[slot, h0 .. h0 + 64) for every token,
// by the 128 threads of one warpgroup (ctid): 8 threads per token, 8 values (16 bytes) each. y and out are bf16
// rows of `hidden`; zero for a token with no served entry. entry_slot and weights [T * top_k] are
// args.combine's global arrays or copies in shared memory (generic pointers).
__device__ __forceinline__ void combineHiddenBlock(const GroupedGemmArgs& args, const int* entry_slot,
                                                   const float* weights, const uint16_t* y, int hidden, int h0,
                                                   int ctid) {
    // Entries whose loads are in flight together (the sum stays in entry order). NOTE: 8 made ptxas spill in the
    // four-CTAs-per-SM tiny8 down kernel (64 registers), which cost more than the second round trip saves.
    constexpr int kBatch = 4;
    const int col = h0 + (ctid & 7) * 8;
    for (int t = ctid >> 3; t < args.combine.num_tokens; t += 16) {
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int j0 = 0; j0 < args.top_k; j0 += kBatch) {
            int slot[kBatch];
            float w[kBatch];
            uint4 packed[kBatch];
#pragma unroll
            for (int q = 0; q < kBatch; ++q) {
                const int j = j0 + q;
                slot[q] = j < args.top_k ? entry_slot[t * args.top_k + j] : -1;
            }
#pragma unroll
            for (int q = 0; q < kBatch; ++q) {
                w[q] = 0.0f;
                packed[q] = make_uint4(0, 0, 0, 0);
                if (slot[q] >= 0) {
                    w[q] = weights[t * args.top_k + j0 + q];
                    // NOTE: y was written by other CTAs during this kernel: read it from L2 (ld.global.cg).
                    packed[q] =
                        __ldcg(reinterpret_cast<const uint4*>(y + static_cast<int64_t>(slot[q]) * hidden + col));
                }
            }
#pragma unroll
            for (int q = 0; q < kBatch; ++q) {
                if (slot[q] >= 0) {
                    const uint32_t words[4] = {packed[q].x, packed[q].y, packed[q].z, packed[q].w};
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        acc[2 * r] += w[q] * __uint_as_float(words[r] << 16);
                        acc[2 * r + 1] += w[q] * __uint_as_float(words[r] & 0xffff0000u);
                    }
                }
            }
        }
        uint32_t words[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * r]));
            const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * r + 1]));
            words[r] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4*>(args.combine.out + static_cast<int64_t>(t) * hidden + col) =
            make_uint4(words[0], words[1], words[2], words[3]);
    }
}

// Called by the 128 threads of consumer warpgroup `wg` after its epilogue stored the 64-row block `block` of y for
// one item: counts the block as written, and the arrival that completes it (`total_tiles` arrivals: one per token
// tile of every expert) combines the block and resets its counter. `flag` is a shared-memory int of this warpgroup
// that no thread reads or writes between its epilogues.
__device__ __forceinline__ void fusedCombineArrive(const GroupedGemmArgs& args, const int* entry_slot,
                                                   const float* weights, int total_tiles, int block, int wg, int ctid,
                                                   int* flag) {
    // The warpgroup's y stores precede thread 0's arrival (through the barrier), whose release makes them visible
    // device-wide before the count; its acquire makes the earlier arrivals' y stores visible to the completing
    // warpgroup (through the second barrier). One thread and one atomic keep the consumer's stall short.
    sm90::namedBarrierSync(1 + wg, 128);
    if (ctid == 0) {
        *flag = sm90::atomicAddAcqRel(args.combine.counters + block, 1) == total_tiles - 1 ? 1 : 0;
    }
    sm90::namedBarrierSync(1 + wg, 128);
    if (*flag == 0) {
        return;  // the same for every thread of the warpgroup
    }
    combineHiddenBlock(args, entry_slot, weights, args.out, args.out_ld, 64 * block, ctid);
    if (ctid == 0) {
        args.combine.counters[block] = 0;
    }
}

}  // namespace afd::kernels::cuda::grouped_gemm
