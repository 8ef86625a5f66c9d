// Launch interface of the read-stream kernel of `afd bench stream` (stream_kernel.cu, stream_bench.h). Host-only
// header (CUDA runtime types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace afd::lab {

// L2 policies of the stream kernel's reads: no cache hint; createpolicy evict_normal on every read; evict_first on the
// DRAM bytes (the L2-resident ones without a hint); the expert GEMMs' (evict_first DRAM, evict_last L2-resident).
enum StreamPolicy : int { kStreamNoHint = 0, kStreamEvictNormal = 1, kStreamDramEvictFirst = 2, kStreamLayer = 3 };

// Stages per item of the pieced DRAM reads (StreamKernelArgs::dram_pieces): a gate-up item of the expert GEMMs
// reads 2048 / 64 k-blocks.
inline constexpr int kStreamItemStages = 32;

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
    // > 1: the TMA path reads each stage's DRAM bytes as this many pieces, as the expert GEMMs read a stage of packed
    // weights: stages come in items of kStreamItemStages, and piece p of an item's stage k is bytes [k b, (k + 1) b) of
    // the item's p-th run of kStreamItemStages b bytes (b = dram_stage_bytes / dram_pieces; the runs follow each
    // other).
    int dram_pieces = 1;
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
    // 96 or 128: the DRAM bytes of each stage (dram_stage_bytes = 32 KiB) come from threads [256 - stage_load_threads,
    // 256) instead of TMA, as the expert GEMMs' weights would from a loader warpgroup: 16-byte loads into registers
    // issued one stage ahead, then stored to the stage in the 128-byte swizzle wgmma reads (stage_load_cp_async: by
    // cp.async instead). The TMA thread copies only the stage's l2_stage_bytes; the stage is full when both landed.
    int stage_load_threads = 0;
    bool stage_load_cp_async = false;
    // L2 policies of the reads (StreamPolicy; the expert GEMMs': DRAM bytes evict_first as weights read once,
    // L2-resident bytes evict_last as token tiles).
    int policy = 0;
    uint64_t* stamps = nullptr;  // [ctas][kStreamStamps], zero before the launch
    uint32_t* sink = nullptr;
};

size_t streamKernelSharedBytes(const StreamKernelArgs& args);
int64_t streamKernelLoadStepBytes();
cudaError_t launchStreamKernel(const StreamKernelArgs& args, int ctas, cudaStream_t stream);

}  // namespace afd::lab
