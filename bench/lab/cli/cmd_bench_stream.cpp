// `afd bench stream`: how fast a number of SMs read device memory, by TMA, by loads, and beside TMA reads of L2
// (lab/stream_bench.h).
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "lab/cli/bench_commands.h"
#include "lab/cli/bench_flag_checks.h"
#if defined(AFD_HAVE_CUDA)
#include "lab/stream_bench.h"
#endif

namespace afd::cli {
namespace {

#if defined(AFD_HAVE_CUDA)
struct BenchStreamFlags {
    lab::StreamBenchOptions options;
    int64_t mib_per_path = 24;
    std::string csv;
};

void printTable(const lab::StreamBenchResult& r, const lab::StreamBenchOptions& o) {
    printBenchRates(r.device, r.copy_tbps, r.gemm_tflops, r.gemm_burst_tflops);
    fmt::print("one CTA per SM, {} MiB per path and CTA; per-SM rates: each CTA's path bytes / its own time\n",
               o.bytes_per_path >> 20);
    fmt::print("{:>15} {:>6} {:>6} {:>4} {:>6} {:>8} {:>7} {:>10} {:>7} {:>12} {:>12}\n", "mode", "policy", "pieces",
               "SMs", "stages", "dram_KiB", "l2_KiB", "dram_TB/s", "%copy", "tma_GB/s/SM", "lsu_GB/s/SM");
    for (const auto& row : r.rows) {
        fmt::print("{:>15} {:>6} {:>6} {:>4} {:>6} {:>8} {:>7} {:>10.3f} {:>7.1f} {:>12.1f} {:>12.1f}\n", row.mode,
                   row.policy, row.pieces, row.sms, row.stages, row.mode == "tma-l2" ? 0 : row.stage_kib,
                   row.mode == "tma-l2" ? row.stage_kib : row.stage_l2_kib, row.dram_tbps, row.pct_of_copy,
                   row.tma_gbps_per_sm, row.lsu_gbps_per_sm);
    }
}

bool writeCsv(const std::string& path, const lab::StreamBenchResult& r) {
    const auto f = openBenchCsv("bench stream", path);
    if (f == nullptr) {
        return false;
    }
    fmt::print(
        f.get(),
        "device,copy_tbps,mode,policy,pieces,sms,stages,stage_kib,stage_l2_kib,dram_tbps,pct_of_copy,tma_gbps_per_sm,"
        "lsu_gbps_per_sm\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(), "{},{:.3f},{},{},{},{},{},{},{:.3f},{:.2f},{:.2f},{:.2f}\n", r.device, r.copy_tbps,
                   row.mode, row.policy, row.sms, row.stages, row.stage_kib, row.stage_l2_kib, row.dram_tbps,
                   row.pct_of_copy, row.tma_gbps_per_sm, row.lsu_gbps_per_sm);
    }
    return true;
}

int runBenchStream(BenchStreamFlags& flags) {
    flags.options.bytes_per_path = flags.mib_per_path << 20;
    return runBenchBody("bench stream", [&] {
        const auto result = lab::runStreamBench(flags.options);
        printTable(result, flags.options);
        return flags.csv.empty() || writeCsv(flags.csv, result);
    });
}
#endif

}  // namespace

void addBenchStreamCommand(CLI::App& bench, int& exit_code) {
    CLI::App* stream = bench.add_subcommand(
        "stream", "time reads of device memory by a number of SMs, by TMA, by loads, and beside TMA reads of L2");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchStreamFlags>();
    stream
        ->add_option("--modes", flags->options.modes,
                     "what each SM reads and how (lab/stream_bench.h); default tma, tma-l2, lsu, tma+lsu, "
                     "tma-l2+lsu; tma+lsu-l2, tma+cp-l2, tma+cp-stage and tma+cp128-stage need --stage-l2-kib > 0; "
                     "ld96, ld128, cp96 and cp128 fill the stages' DRAM bytes by threads instead of TMA")
        ->delimiter(',')
        ->check(CLI::IsMember(lab::streamBenchModes()));
    stream->add_option("--sms", flags->options.sms, "CTAs, one per SM (capped at the device's SMs)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 12));
    stream->add_option("--stages", flags->options.stages, "TMA ring stages (each point with each)")
        ->delimiter(',')
        ->check(CLI::Range(1, 64));
    stream->add_option("--stage-kib", flags->options.stage_kib, "KiB of each TMA stage from DRAM (tma-l2: from L2)")
        ->check(CLI::Range(1, 128));
    stream
        ->add_option("--stage-l2-kib", flags->options.stage_l2_kib,
                     "KiB of each tma, ld or cp stage from an L2-resident buffer besides (each point with each)")
        ->delimiter(',')
        ->check(CLI::Range(0, 128));
    stream
        ->add_option("--policies", flags->options.policies,
                     "L2 policies of the reads (each point with each): none (no hint), normal (evict_normal), first "
                     "(DRAM bytes evict_first), layer (DRAM bytes evict_first, L2-resident bytes evict_last, as the "
                     "expert GEMMs read weights and token tiles)")
        ->delimiter(',')
        ->check(CLI::IsMember(lab::streamBenchPolicies()));
    stream
        ->add_option("--pieces", flags->options.pieces,
                     "pieces of each TMA stage's DRAM bytes (each point with each): 1 one run, 4 as the expert GEMMs "
                     "read packed weights (8 KiB blocks 256 KiB apart)")
        ->delimiter(',')
        ->check(CLI::Range(1, 64));
    stream->add_option("--mib-per-path", flags->mib_per_path, "MiB each path of a CTA reads")
        ->check(CLI::Range(1, 1024));
    stream->add_option("--reps", flags->options.reps, "timed launches per point")->check(CLI::PositiveNumber);
    addWarmupMsOption(*stream, flags->options.warmup_ms);
    stream->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    stream->callback([flags, &exit_code] { exit_code = runBenchStream(*flags); });
#else
    stream->callback([&exit_code] {
        AFD_LOG_ERROR("bench stream: this afd was built without the CUDA backend");
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
