// Host side of the grouped expert GEMMs: sizes the persistent grid and launches one configuration's kernels
// (moe_grouped_gemm.cuh), and AFD_DEFINE_GROUPED_GEMM, which each per-configuration .cu file expands once.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/moe_grouped_gemm.cuh"

namespace afd::kernels::cuda::grouped_gemm {

// Host side: sizes the persistent grid from the occupancy and launches (programmatic serialization optional).
template <bool kGateUp, int kConsumers, int kMBlocks, int kBlockTokens, int kStages, bool kTmaTokens, int kCluster>
cudaError_t launch(const CUtensorMap& tmap, const CUtensorMap& tmap_b, const CUtensorMap& tmap_b_full,
                   const GroupedGemmArgs& args, int sm_count, cudaStream_t stream, bool programmatic) {
    using L = Layout<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;
    void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, GroupedGemmArgs) = nullptr;
    if constexpr (L::kStreamsBesideGather) {
        kernel =
            groupedGemmKernelBesideGather<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;
    } else {
        kernel = groupedGemmKernel<kGateUp, kConsumers, kMBlocks, kBlockTokens, kStages, kTmaTokens, kCluster>;
    }
    const size_t smem = L::bytes(args.num_experts);
    // The shared-memory limit is raised to the most any expert count needs.
    static std::atomic<uint64_t> configured_devices{0};
    cudaError_t err = configureOncePerDevice(configured_devices, [&] {
        cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(L::bytes(kMaxPermuteExperts)));
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
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    int resident = 0;  // CTAs that fit on the device at once
    if constexpr (kCluster == 1) {
        int blocks_per_sm = 0;
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, L::kThreads, smem);
        resident = blocks_per_sm * sm_count;
    } else {
        config.gridDim = dim3(static_cast<unsigned>(kCluster * sm_count));
        config.numAttrs = 1;
        int clusters = 0;
        err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
        resident = clusters * kCluster;
    }
    if (err != cudaSuccess) {
        return err;
    }
    if (resident < kCluster) {
        return cudaErrorInvalidConfiguration;
    }
    const int64_t max_items = static_cast<int64_t>(args.max_token_tiles) * args.n_tiles;
    if (max_items > 0 && max_items < resident) {
        resident = static_cast<int>((max_items + kCluster - 1) / kCluster * kCluster);
    }
    config.gridDim = dim3(static_cast<unsigned>(resident));
    // The cluster attribute only for clusters (a plain launch keeps its former configuration), then PDL.
    config.attrs = kCluster == 1 ? attr + 1 : attr;
    config.numAttrs = (kCluster == 1 ? 0 : 1) + (programmatic ? 1 : 0);
    return cudaLaunchKernelEx(&config, kernel, tmap, tmap_b, tmap_b_full, args);
}

}  // namespace afd::kernels::cuda::grouped_gemm

// Defines launchGroupedGemm<name> for the shape constant k<name>Shape (moe_grouped_gemm.h).
#define AFD_DEFINE_GROUPED_GEMM(name)                                                                                 \
    namespace afd::kernels::cuda {                                                                                    \
    cudaError_t launchGroupedGemm##name(bool gate_up, const CUtensorMap& tmap_a, const CUtensorMap& tmap_b,           \
                                        const CUtensorMap& tmap_b_full, const GroupedGemmArgs& args, int sm_count,    \
                                        cudaStream_t stream, bool programmatic) {                                     \
        constexpr TileShape s = k##name##Shape;                                                                       \
        return gate_up ? grouped_gemm::launch<true, s.consumers, s.m_blocks, s.block_tokens,                          \
                                              (s.gate_up_stages > 0 ? s.gate_up_stages : s.stages), s.tma_tokens,     \
                                              s.cluster>(tmap_a, tmap_b, tmap_b_full, args, sm_count, stream,         \
                                                         programmatic)                                                \
                       : grouped_gemm::launch<false, s.consumers, s.m_blocks, s.block_tokens, s.stages, s.tma_tokens, \
                                              s.cluster>(tmap_a, tmap_b, tmap_b_full, args, sm_count, stream,         \
                                                         programmatic);                                               \
    }                                                                                                                 \
    }
