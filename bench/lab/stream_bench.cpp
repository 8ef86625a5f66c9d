#include "lab/stream_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "lab/bench_timing.h"
#include "lab/stream_kernel.h"

namespace afd::lab {
namespace {

constexpr int64_t kL2BytesPerCta = 128 * 1024;  // 17 MB over 132 SMs: stays in L2
constexpr int64_t kMaxRingKib = 200;

// The modes whose load path reads L2 bytes paced by the TMA stages.
bool isLoadL2Mode(const std::string& mode) { return mode == "tma+lsu-l2" || mode == "tma+cp-l2"; }
// The modes whose stages hold L2 bytes copied by cp.async beside the TMA's DRAM bytes; 0: none.
int stageCopyThreads(const std::string& mode) {
    return mode == "tma+cp-stage" ? 64 : (mode == "tma+cp128-stage" ? 128 : 0);
}

// The modes whose stages' DRAM bytes come from loader threads (StreamKernelArgs::stage_load_threads); 0: none.
int stageLoadThreads(const std::string& mode) {
    if (mode == "ld96" || mode == "cp96") {
        return 96;
    }
    return mode == "ld128" || mode == "cp128" ? 128 : 0;
}

double median(std::vector<double> v) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The paths a mode reads by.
struct ModePaths {
    bool tma;          // a TMA ring
    bool paced_l2;     // lsu+tma-l2
    bool tma_from_l2;  // the ring reads the L2 buffer only
    bool lsu;          // the load path reads DRAM
    bool lsu_l2;       // the load path reads the L2 buffer, paced by the ring
};

ModePaths modePaths(const std::string& mode) {
    ModePaths p;
    p.tma = mode != "lsu";
    p.paced_l2 = mode == "lsu+tma-l2";
    p.tma_from_l2 = mode == "tma-l2" || mode == "tma-l2+lsu" || p.paced_l2;
    p.lsu = mode == "lsu" || mode == "tma+lsu" || mode == "tma-l2+lsu" || p.paced_l2;
    p.lsu_l2 = isLoadL2Mode(mode);
    return p;
}

// One row of the table: a mode with one value of each option list.
struct StreamPoint {
    std::string mode;
    int stages;
    int l2_kib;
    std::string policy;
    int pieces;
    int ctas;
};

// The device buffers of a run (runStreamBench owns them).
struct StreamBuffers {
    const DeviceMemory& dram;
    const DeviceMemory& l2;
    const DeviceMemory& stamps;
    const DeviceMemory& sink;
    int64_t region;  // bytes of each CTA's DRAM region
};

// Times one point: reps launches (after an untimed one), the medians of the rates. pct_of_copy is left to the caller.
StreamBenchRow timePoint(const StreamBenchOptions& o, const StreamPoint& point, const ModePaths& paths,
                         const StreamBuffers& buffers, std::vector<uint64_t>& host, cudaStream_t s) {
    const std::string& mode = point.mode;
    const int64_t stage_bytes = static_cast<int64_t>(o.stage_kib) * 1024;
    const int64_t l2_stage = static_cast<int64_t>(point.l2_kib) * 1024;
    StreamKernelArgs args;
    args.dram = static_cast<const uint8_t*>(buffers.dram.get());
    args.region_bytes = buffers.region;
    args.lsu_offset = o.bytes_per_path;
    args.l2 = static_cast<const uint8_t*>(buffers.l2.get());
    args.l2_bytes = kL2BytesPerCta;
    args.stages = std::max(point.stages, 1);
    args.dram_stage_bytes = paths.tma && !paths.tma_from_l2 ? stage_bytes : 0;
    args.l2_stage_bytes = paths.tma_from_l2 ? stage_bytes : (paths.lsu_l2 ? 0 : l2_stage);
    args.lsu_l2_stage_bytes = paths.lsu_l2 ? l2_stage : 0;
    args.lsu_cp_async = mode == "tma+cp-l2";
    args.cp_threads = stageCopyThreads(mode);
    if (args.cp_threads > 0) {
        args.l2_stage_bytes = 0;
        args.cp_stage_bytes = l2_stage;
    }
    args.tma_stages = paths.tma ? o.bytes_per_path / stage_bytes : 0;
    args.tma_paced_by_loads = paths.paced_l2;
    if (paths.paced_l2) {
        args.tma_stages = o.bytes_per_path / (2 * stage_bytes);
    }
    args.dram_pieces = point.pieces;
    args.stage_load_threads = stageLoadThreads(mode);
    args.stage_load_cp_async = mode == "cp96" || mode == "cp128";
    args.policy = static_cast<int>(std::find(streamBenchPolicies().begin(), streamBenchPolicies().end(), point.policy) -
                                   streamBenchPolicies().begin());
    args.lsu_bytes = paths.lsu ? o.bytes_per_path : 0;
    args.stamps = buffers.stamps.as<uint64_t>();
    args.sink = buffers.sink.as<uint32_t>();
    const int64_t tma_cta_bytes = args.tma_stages * (args.dram_stage_bytes + args.l2_stage_bytes + args.cp_stage_bytes);
    const int64_t dram_cta_bytes = args.tma_stages * args.dram_stage_bytes + args.lsu_bytes;
    const int ctas = point.ctas;
    std::vector<double> dram_tbps;
    std::vector<double> tma_gbps;
    std::vector<double> lsu_gbps;
    for (int rep = -1; rep < o.reps; ++rep) {  // rep -1: untimed (module load, first touch)
        AFD_CUDA_CHECK(cudaMemsetAsync(args.stamps, 0, buffers.stamps.bytes(), s));
        AFD_CUDA_CHECK(launchStreamKernel(args, ctas, s));
        AFD_CUDA_CHECK(
            cudaMemcpyAsync(host.data(), args.stamps, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, s));
        AFD_CUDA_CHECK(cudaStreamSynchronize(s));
        if (rep < 0) {
            continue;
        }
        uint64_t start = UINT64_MAX;
        uint64_t dram_end = 0;
        std::vector<double> tma_cta;
        std::vector<double> lsu_cta;
        for (int b = 0; b < ctas; ++b) {
            const uint64_t* st = &host[static_cast<size_t>(b) * kStreamStamps];
            start = std::min(start, st[0]);
            if (args.dram_stage_bytes > 0) {
                dram_end = std::max(dram_end, st[1]);
            }
            if (paths.lsu) {
                dram_end = std::max(dram_end, st[2]);
            }
            if (paths.lsu_l2 && st[2] > st[0]) {
                lsu_cta.push_back(static_cast<double>(args.tma_stages * args.lsu_l2_stage_bytes) /
                                  static_cast<double>(st[2] - st[0]));
            }
            if (paths.tma && st[1] > st[0]) {  // bytes per ns = GB/s
                tma_cta.push_back(static_cast<double>(tma_cta_bytes) / static_cast<double>(st[1] - st[0]));
            }
            if (paths.lsu && st[2] > st[0]) {
                lsu_cta.push_back(static_cast<double>(args.lsu_bytes) / static_cast<double>(st[2] - st[0]));
            }
        }
        if (dram_cta_bytes > 0 && dram_end > start) {
            dram_tbps.push_back(static_cast<double>(ctas) * static_cast<double>(dram_cta_bytes) /
                                static_cast<double>(dram_end - start) / 1e3);
        }
        tma_gbps.push_back(median(tma_cta));
        lsu_gbps.push_back(median(lsu_cta));
    }
    StreamBenchRow row;
    row.mode = mode;
    row.policy = point.policy;
    row.pieces = point.pieces;
    row.sms = ctas;
    row.stages = paths.tma ? point.stages : 0;
    row.stage_kib = paths.tma ? o.stage_kib : 0;
    row.stage_l2_kib = paths.tma && !paths.tma_from_l2 ? point.l2_kib : 0;
    row.dram_tbps = median(dram_tbps);
    row.tma_gbps_per_sm = median(tma_gbps);
    row.lsu_gbps_per_sm = median(lsu_gbps);
    return row;
}

}  // namespace

StreamBenchResult runStreamBench(const StreamBenchOptions& o) {
    AFD_CHECK(o.reps >= 1, "bench stream: reps {} must be >= 1", o.reps);
    const int64_t stage_bytes = static_cast<int64_t>(o.stage_kib) * 1024;
    AFD_CHECK(o.stage_kib >= 1 && kL2BytesPerCta % stage_bytes == 0,
              "bench stream: stage KiB {} must divide {} KiB (the L2 buffer)", o.stage_kib, kL2BytesPerCta / 1024);
    const int64_t step = std::max(stage_bytes, streamKernelLoadStepBytes());
    AFD_CHECK(o.bytes_per_path >= step && o.bytes_per_path % step == 0,
              "bench stream: bytes per path {} must be a positive multiple of {}", o.bytes_per_path, step);
    for (const int l2_kib : o.stage_l2_kib) {
        AFD_CHECK(l2_kib >= 0 && l2_kib % 2 == 0 &&
                      (l2_kib == 0 || kL2BytesPerCta % (static_cast<int64_t>(l2_kib) * 1024) == 0),
                  "bench stream: stage L2 KiB {} must be 0 or an even divisor of {} KiB", l2_kib,
                  kL2BytesPerCta / 1024);
    }
    for (const int stages : o.stages) {
        AFD_CHECK(stages >= 1, "bench stream: stages {} must be >= 1", stages);
    }
    AFD_CHECK(!o.modes.empty() && !o.sms.empty() && !o.stages.empty() && !o.stage_l2_kib.empty() && !o.policies.empty(),
              "bench stream: modes, SMs, stages, stage L2 KiB and policies each need at least one value");
    for (const std::string& policy : o.policies) {
        AFD_CHECK(std::find(streamBenchPolicies().begin(), streamBenchPolicies().end(), policy) !=
                      streamBenchPolicies().end(),
                  "bench stream: unknown policy '{}' (none, normal, first or layer)", policy);
    }
    for (const std::string& mode : o.modes) {
        AFD_CHECK(std::find(streamBenchModes().begin(), streamBenchModes().end(), mode) != streamBenchModes().end(),
                  "bench stream: unknown mode '{}'", mode);
        for (const int l2_kib : o.stage_l2_kib) {
            const bool l2_in_stage = mode == "tma" || stageCopyThreads(mode) > 0 || stageLoadThreads(mode) > 0;
            AFD_CHECK(stageLoadThreads(mode) == 0 || o.stage_kib == 32,
                      "bench stream: mode {} fills stages of 32 KiB from DRAM (stage KiB {})", mode, o.stage_kib);
            AFD_CHECK((!isLoadL2Mode(mode) && stageCopyThreads(mode) == 0) || l2_kib > 0,
                      "bench stream: mode {} needs stage L2 KiB > 0", mode);
            for (const int stages : o.stages) {
                const int64_t ring_kib = static_cast<int64_t>(stages) * (o.stage_kib + (l2_in_stage ? l2_kib : 0));
                AFD_CHECK(ring_kib <= kMaxRingKib,
                          "bench stream: mode {}: {} stages of {} + {} KiB exceed {} KiB of shared memory", mode,
                          stages, o.stage_kib, l2_in_stage ? l2_kib : 0, kMaxRingKib);
            }
        }
    }
    for (const int pieces : o.pieces) {
        AFD_CHECK(pieces >= 1 && stage_bytes % (16 * pieces) == 0,
                  "bench stream: pieces {} must be >= 1 and divide a stage of {} KiB into multiples of 16 bytes",
                  pieces, o.stage_kib);
        AFD_CHECK(pieces == 1 || (o.bytes_per_path % (kStreamItemStages * stage_bytes) == 0),
                  "bench stream: pieces {} read items of {} stages: bytes per path {} must be a multiple of {}", pieces,
                  kStreamItemStages, o.bytes_per_path, kStreamItemStages * stage_bytes);
    }
    for (const int sms : o.sms) {
        AFD_CHECK(sms >= 1, "bench stream: SMs {} must be >= 1", sms);
    }
    AFD_CHECK(deviceCount() > 0, "afd bench stream needs a CUDA device");
    Stream stream;
    const cudaStream_t s = stream.get();
    StreamBenchResult result = startBenchResult<StreamBenchRow>(s, o.warmup_ms);
    int device = 0;
    AFD_CUDA_CHECK(cudaGetDevice(&device));
    int sm_count = 0;
    AFD_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    const int max_ctas = std::min(sm_count, *std::max_element(o.sms.begin(), o.sms.end()));

    // Each CTA's DRAM region holds the TMA path's bytes, then the load path's.
    const int64_t region = 2 * o.bytes_per_path;
    DeviceMemory dram(static_cast<size_t>(region) * static_cast<size_t>(max_ctas));
    DeviceMemory l2(static_cast<size_t>(kL2BytesPerCta) * static_cast<size_t>(max_ctas));
    DeviceMemory stamps(static_cast<size_t>(max_ctas) * kStreamStamps * sizeof(uint64_t));
    DeviceMemory sink(sizeof(uint32_t));
    fillRandom(dram.get(), dram.bytes() / 2, 11, 1.0f, s);
    fillRandom(l2.get(), l2.bytes() / 2, 12, 1.0f, s);
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));

    std::vector<uint64_t> host(static_cast<size_t>(max_ctas) * kStreamStamps);
    const StreamBuffers buffers{dram, l2, stamps, sink, region};
    for (const std::string& mode : o.modes) {
        const ModePaths paths = modePaths(mode);
        // The ring's variants apply to the TMA modes; tma-l2 has no DRAM part to add L2 bytes to or cut in pieces.
        const bool dram_by_ring = paths.tma && !paths.tma_from_l2;
        const bool dram_by_tma = dram_by_ring && stageLoadThreads(mode) == 0;  // pieces apply to TMA copies
        for (const int stages : paths.tma ? o.stages : std::vector<int>{0}) {
            for (const int l2_kib : dram_by_ring ? o.stage_l2_kib : std::vector<int>{0}) {
                for (const std::string& policy : o.policies) {
                    for (const int pieces : dram_by_tma ? o.pieces : std::vector<int>{1}) {
                        for (const int requested : o.sms) {
                            const StreamPoint point{mode,   stages, l2_kib,
                                                    policy, pieces, std::min(requested, sm_count)};
                            StreamBenchRow row = timePoint(o, point, paths, buffers, host, s);
                            row.pct_of_copy = result.copy_tbps > 0 ? 100.0 * row.dram_tbps / result.copy_tbps : 0;
                            result.rows.push_back(row);
                        }
                    }
                }
            }
        }
    }
    return result;
}

}  // namespace afd::lab
