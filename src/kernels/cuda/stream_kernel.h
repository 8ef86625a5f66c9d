// Launch interface of the read-stream kernel of `afd bench stream` (stream_kernel.cu, stream_bench.h). Host-only
// header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace afd::kernels::cuda {

// Stamps per CTA (%globaltimer, ns): [0] start, [1] the TMA path's last stage landed, [2] the load path done.
inline constexpr int kStreamStamps = 3;

// CTA b reads: by TMA, tma_stages stages of a ring of `stages`, each dram_stage_bytes from dram + b * region_bytes
// (the next ones each stage) and l2_stage_bytes from l2 + b * l2_bytes (round robin over those l2_bytes); by loads,
// lsu_bytes (a multiple of streamKernelLoadStepBytes) from dram + b * region_bytes + lsu_offset. Sizes and offsets are
// multiples of 16. [2] then stamps the paced load path's end (lsu_l2_stage_bytes).
struct StreamKernelArgs {
    const uint8_t* dram = nullptr;
    int64_t region_bytes = 0;
    int64_t lsu_offset = 0;
    const uint8_t* l2 = nullptr;
    int64_t l2_bytes = 0;
    int stages = 0;
    int64_t dram_stage_bytes = 0;
    int64_t l2_stage_bytes = 0;
    int64_t tma_stages = 0;
    int64_t lsu_bytes = 0;
    // > 0: the load path reads this many bytes of l2 + b * l2_bytes for each stage the TMA path lands instead
    // (round robin over the buffer; a multiple of 2 KB).
    int64_t lsu_l2_stage_bytes = 0;
    bool lsu_cp_async = false;  // the paced reads by cp.async into shared memory instead of loads into registers
    // > 0: each stage also holds cp_stage_bytes of l2 + b * l2_bytes copied by cp.async by threads [128, 128 +
    // cp_threads) as the slot frees (a multiple of cp_threads * 16); the stage is full when they have landed too.
    int64_t cp_stage_bytes = 0;
    int cp_threads = 0;
    // The TMA path issues stage c only once the load path has read 2 (c + 1) stages' bytes (L2 bytes by TMA at half
    // the rate of DRAM bytes by loads).
    bool tma_paced_by_loads = false;
    uint64_t* stamps = nullptr;  // [ctas][kStreamStamps], zero before the launch
    uint32_t* sink = nullptr;
};

size_t streamKernelSharedBytes(const StreamKernelArgs& args);
int64_t streamKernelLoadStepBytes();
cudaError_t launchStreamKernel(const StreamKernelArgs& args, int ctas, cudaStream_t stream);

}  // namespace afd::kernels::cuda
