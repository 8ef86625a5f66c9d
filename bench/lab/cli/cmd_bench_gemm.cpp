// `afd bench gemm`: the attention side's cuBLASLt GEMMs at decode row counts, every offered algorithm timed
// (lab/gemm_bench.h).
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
#include "lab/gemm_bench.h"
#endif

namespace afd::cli {
namespace {

#if defined(AFD_HAVE_CUDA)
struct BenchGemmFlags {
    lab::GemmBenchOptions options;
    std::string csv;
};

void printTable(const lab::GemmBenchResult& r) {
    printBenchRates(r.device, r.copy_tbps, r.gemm_tflops, r.gemm_burst_tflops);
    fmt::print("{:>9} {:>7} {:>6} {:>5} {:>15} {:>9} {:>9} {:>7} {:>6} {:>8}  {}\n", "shape", "N", "K", "M", "kind",
               "median_us", "floor_us", "%floor", "TB/s", "M1=Mref", "algorithm");
    for (const auto& row : r.rows) {
        fmt::print("{:>9} {:>7} {:>6} {:>5} {:>15} {:>9.2f} {:>9.2f} {:>7.1f} {:>6.2f} {:>8}  {}\n", row.shape, row.n,
                   row.k, row.m, row.kind, row.median_us, row.floor_us, row.pct_of_floor, row.read_tbps, row.bitwise,
                   row.algo);
    }
}

bool writeCsv(const std::string& path, const lab::GemmBenchResult& r) {
    const auto f = openBenchCsv("bench gemm", path);
    if (f == nullptr) return false;
    fmt::print(f.get(),
               "device,copy_tbps,gemm_tflops,shape,n,k,m,kind,median_us,floor_us,pct_of_floor,read_tbps,"
               "bitwise,candidates,algo\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(), "{},{:.3f},{:.1f},{},{},{},{},{},{:.3f},{:.3f},{:.2f},{:.3f},{},{},\"{}\"\n", r.device,
                   r.copy_tbps, r.gemm_tflops, row.shape, row.n, row.k, row.m, row.kind, row.median_us, row.floor_us,
                   row.pct_of_floor, row.read_tbps, row.bitwise, row.candidates, row.algo);
    }
    return true;
}
#endif

}  // namespace

void addBenchGemmCommand(CLI::App& bench, int& exit_code) {
    CLI::App* gemm = bench.add_subcommand(
        "gemm", "time every cuBLASLt algorithm of the attention side's GEMMs at decode row counts and print a table");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchGemmFlags>();
    gemm->add_option("--rows", flags->options.rows, "row counts M (tokens)")->delimiter(',');
    gemm->add_option("--splits", flags->options.splits, "split-K counts forced on the batch-invariant algorithms")
        ->delimiter(',');
    gemm->add_option("--reps", flags->options.reps, "timed graph replays per point")->check(CLI::PositiveNumber);
    addWarmupMsOption(*gemm, flags->options.warmup_ms);
    gemm->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    gemm->callback([flags, &exit_code] {
        if (!tokensAtLeastOne("bench gemm", flags->options.rows)) {
            exit_code = core::kExitBadConfig;
            return;
        }
        exit_code = runBenchBody("bench gemm", [&] {
            const auto result = lab::runGemmBench(flags->options);
            printTable(result);
            return flags->csv.empty() || writeCsv(flags->csv, result);
        });
    });
#else
    gemm->callback([&exit_code] {
        AFD_LOG_ERROR("bench gemm: this afd was built without the CUDA backend");
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
