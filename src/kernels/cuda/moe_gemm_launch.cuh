// Host side of the grouped expert GEMMs: sizes the persistent grid and launches one configuration's kernels
// (moe_grouped_gemm.cuh), and launchGroupedGemm<tile>, which each configuration's .cu file instantiates once
// (AFD_INSTANTIATE_GROUPED_GEMM).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_grouped_gemm.cuh"

namespace afd::kernels::cuda::grouped_gemm {

// Sizes the persistent grid from the occupancy and launches with programmatic dependent launch.
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens>
cudaError_t launch(const GroupedGemmParams& params, cudaStream_t stream) {
    const GroupedGemmArgs& args = params.args;
    using L = Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, GroupedGemmArgs) = nullptr;
    if constexpr (L::kStreamsBesideGather) {
        kernel = groupedGemmKernelBesideGather<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    } else {
        kernel = groupedGemmKernel<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens>;
    }
    const size_t smem = L::bytes(args.num_experts);
    // The shared-memory limit is raised to the most any expert count needs.
    static std::atomic<uint64_t> configured_devices{0};
    cudaError_t err = configureOncePerDevice(configured_devices, [&] {
        cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::bytes(kMoeMaxExperts)));
        if (set != cudaSuccess) {
            return set;
        }
        // The largest shared-memory carveout for every shape: an SM set up for one kernel's carveout takes CTAs of
        // the next kernel (programmatic launch) only where its carveout fits them too, so differing choices kept
        // the down kernel's CTAs off the SMs that ran the gate-up kernel (none of these kernels relies on L1).
        return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared);
    });
    if (err != cudaSuccess) {
        return err;
    }
    cudaLaunchConfig_t config{};
    config.blockDim = dim3(L::kThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int blocks_per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, L::kThreads, smem);
    if (err != cudaSuccess) {
        return err;
    }
    int resident = blocks_per_sm * params.sm_count;  // CTAs that fit on the device at once
    if (resident < 1) {
        return cudaErrorInvalidConfiguration;
    }
    const int64_t max_items = static_cast<int64_t>(args.max_token_tiles) * args.n_tiles;
    if (max_items > 0 && max_items < resident) {
        resident = static_cast<int>(max_items);
    }
    config.gridDim = dim3(static_cast<unsigned>(resident));
    return cudaLaunchKernelEx(&config, kernel, params.weights, params.tokens, params.full_tokens, args);
}

}  // namespace afd::kernels::cuda::grouped_gemm

namespace afd::kernels::cuda {

template <MoeTileConfig kTile>
cudaError_t launchGroupedGemm(const GroupedGemmParams& params, cudaStream_t stream) {
    constexpr MoeTileShape s = moeTileShape(kTile);
    constexpr int kGateUpStages = s.gate_up_stages > 0 ? s.gate_up_stages : s.stages;
    return params.gate_up
               ? grouped_gemm::launch<true, s.consumers, s.m_blocks, s.block_tokens, kGateUpStages, s.tma_tokens>(
                     params, stream)
               : grouped_gemm::launch<false, s.consumers, s.m_blocks, s.block_tokens, s.stages, s.tma_tokens>(params,
                                                                                                              stream);
}

}  // namespace afd::kernels::cuda

// The launcher of configuration `tile` (an enumerator of MoeTileConfig), instantiated in its .cu file.
#define AFD_INSTANTIATE_GROUPED_GEMM(tile)                            \
    template cudaError_t afd::kernels::cuda::launchGroupedGemm<tile>( \
        const afd::kernels::cuda::GroupedGemmParams& params, cudaStream_t stream)
