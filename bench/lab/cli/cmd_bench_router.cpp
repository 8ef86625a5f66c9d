// `afd bench router`: the CUDA router timed on the device against its floor (lab/router_bench.h).
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
#include "lab/router_bench.h"
#endif

namespace afd::cli {
namespace {

#if defined(AFD_HAVE_CUDA)
struct BenchRouterFlags {
    lab::RouterBenchOptions options;
    std::string csv;
    bool no_renormalize = false;
};

void printTable(const lab::RouterBenchResult& r, const lab::RouterBenchOptions& o) {
    printBenchRates(r.device, r.copy_tbps, r.gemm_tflops, r.gemm_burst_tflops);
    fmt::print("router E {} H {} top-{}{}, {} gate weight sets rotated\n", o.experts, o.hidden, o.top_k,
               o.renormalize ? " renormalised" : "", o.weight_sets);
    fmt::print("{:>6} {:>10} {:>8} {:>8} {:>10} {:>7}\n", "T", "median_us", "p10_us", "p90_us", "floor_us", "%floor");
    for (const auto& row : r.rows) {
        fmt::print("{:>6} {:>10.2f} {:>8.2f} {:>8.2f} {:>10.2f} {:>7.1f}\n", row.tokens, row.median_us, row.p10_us,
                   row.p90_us, row.floor_us, row.pct_of_floor);
    }
}

bool writeCsv(const std::string& path, const lab::RouterBenchResult& r) {
    const auto f = openBenchCsv("bench router", path);
    if (f == nullptr) {
        return false;
    }
    fmt::print(f.get(),
               "device,copy_tbps,gemm_tflops,tokens,median_us,p10_us,p90_us,mem_floor_us,flop_floor_us,"
               "floor_us,pct_of_floor\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(), "{},{:.3f},{:.1f},{},{:.2f},{:.2f},{:.2f},{:.3f},{:.3f},{:.3f},{:.2f}\n", r.device,
                   r.copy_tbps, r.gemm_tflops, row.tokens, row.median_us, row.p10_us, row.p90_us, row.mem_floor_us,
                   row.flop_floor_us, row.floor_us, row.pct_of_floor);
    }
    return true;
}

int runBenchRouter(BenchRouterFlags& flags) {
    const auto& o = flags.options;
    constexpr const char* kCommand = "bench router";
    if (!tokensAtLeastOne(kCommand, o.tokens) || !multipleOf(kCommand, "--hidden", o.hidden, 16) ||
        !topKWithinExperts(kCommand, o.top_k, o.experts)) {
        return core::kExitBadConfig;
    }
    flags.options.renormalize = !flags.no_renormalize;
    return runBenchBody("bench router", [&] {
        const auto result = lab::runRouterBench(flags.options);
        printTable(result, flags.options);
        return flags.csv.empty() || writeCsv(flags.csv, result);
    });
}
#endif

}  // namespace

void addBenchRouterCommand(CLI::App& bench, int& exit_code) {
    CLI::App* router = bench.add_subcommand("router", "time the CUDA router against its floor and print a table");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchRouterFlags>();
    router->add_option("--tokens", flags->options.tokens, "token counts T")->delimiter(',');
    router->add_option("--hidden", flags->options.hidden, "hidden size H")->check(CLI::Range(16, 1 << 16));
    router->add_option("--experts", flags->options.experts, "experts E, 1 to 256")->check(CLI::Range(1, 256));
    router->add_option("--top-k", flags->options.top_k, "experts per token K")->check(CLI::Range(1, 32));
    router->add_option("--weight-sets", flags->options.weight_sets, "gate weight sets rotated between replays")
        ->check(CLI::PositiveNumber);
    router->add_option("--reps", flags->options.reps, "timed graph replays per point")->check(CLI::PositiveNumber);
    addWarmupMsOption(*router, flags->options.warmup_ms);
    router->add_flag("--no-renormalize", flags->no_renormalize, "keep the top-k probabilities as they are");
    router->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    router->callback([flags, &exit_code] { exit_code = runBenchRouter(*flags); });
#else
    router->callback([&exit_code] {
        AFD_LOG_ERROR("bench router: this afd was built without the CUDA backend");
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
