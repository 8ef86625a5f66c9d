// `afd bench moe`: the CUDA MoE layer timed on the device against its floor (lab/moe_bench.h).
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "lab/cli/bench_commands.h"
#include "lab/cli/bench_flag_checks.h"
#if defined(AFD_HAVE_CUDA)
#include "lab/moe_bench.h"
#endif

namespace afd::cli {
namespace {

#if defined(AFD_HAVE_CUDA)
struct BenchMoeFlags {
    lab::MoeBenchOptions options;
    std::vector<std::string> tiles{"auto"};
    std::string csv;
    bool no_stages = false;
};

// "auto, tiny8, small16, …" (kMoeTiles).
std::string tileNames() {
    std::string names = "auto";
    for (const kernels::MoeTile& t : kernels::kMoeTiles) {
        names += std::string(", ") + t.name;
    }
    return names;
}

void printTable(const lab::MoeBenchResult& r, const lab::MoeBenchOptions& o) {
    printBenchRates(r.device, r.copy_tbps, r.gemm_tflops, r.gemm_burst_tflops);
    if (o.ffn_ranks > 1) {
        fmt::print("FFN rank 0 of {}: experts [0, {}) of {}; the other ranks' entries are not served here\n",
                   o.ffn_ranks, o.experts / o.ffn_ranks, o.experts);
    }
    fmt::print("{:>6} {:>8} {:>14} {:>4} {:>10} {:>10} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}\n", "T", "routing", "tile",
               "exp", "median_us", "floor_us", "%floor", "TFLOP/s", "perm_us", "gateup_us", "down_us", "comb_us");
    for (const auto& row : r.rows) {
        fmt::print(
            "{:>6} {:>8} {:>14} {:>4} {:>10.1f} {:>10.1f} {:>7.1f} {:>7.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n",
            row.tokens, row.routing, row.tile, row.distinct_experts, row.median_us, row.floor_us, row.pct_of_floor,
            row.tflops, row.permute_us, row.gate_up_us, row.down_us, row.combine_us);
    }
}

bool writeCsv(const std::string& path, const lab::MoeBenchResult& r) {
    const auto f = openBenchCsv("bench moe", path);
    if (f == nullptr) {
        return false;
    }
    fmt::print(f.get(),
               "device,copy_tbps,gemm_tflops,tokens,routing,tile,distinct_experts,entries,median_us,p10_us,p90_us,"
               "mem_floor_us,flop_floor_us,floor_us,pct_of_floor,tflops,permute_us,gate_up_us,down_us,combine_us\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(),
                   "{},{:.3f},{:.1f},{},{},{},{},{},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},"
                   "{:.2f},{:.2f},{:.2f},{:.2f}\n",
                   r.device, r.copy_tbps, r.gemm_tflops, row.tokens, row.routing, row.tile, row.distinct_experts,
                   row.entries, row.median_us, row.p10_us, row.p90_us, row.mem_floor_us, row.flop_floor_us,
                   row.floor_us, row.pct_of_floor, row.tflops, row.permute_us, row.gate_up_us, row.down_us,
                   row.combine_us);
    }
    return true;
}

int runBenchMoe(BenchMoeFlags& flags) {
    flags.options.tiles.clear();
    for (const std::string& name : flags.tiles) {
        kernels::MoeTileConfig tile;
        if (!kernels::parseMoeTileConfig(name.c_str(), &tile)) {
            AFD_LOG_ERROR("bench moe: --tiles: unknown tile config '{}' ({})", name, tileNames());
            return core::kExitBadConfig;
        }
        flags.options.tiles.push_back(tile);
    }
    for (const std::string& routing : flags.options.routings) {
        if (routing != "uniform" && routing != "zipf" && routing != "balanced") {
            AFD_LOG_ERROR("bench moe: --routing: '{}' is not uniform, zipf or balanced", routing);
            return core::kExitBadConfig;
        }
    }
    const auto& o = flags.options;
    constexpr const char* kCommand = "bench moe";
    if (!tokensAtLeastOne(kCommand, o.tokens) || !multipleOf(kCommand, "--hidden", o.hidden, 64) ||
        !multipleOf(kCommand, "--inter", o.inter, 32) || !topKWithinExperts(kCommand, o.top_k, o.experts)) {
        return core::kExitBadConfig;
    }
    if (o.experts % o.ffn_ranks != 0) {
        AFD_LOG_ERROR("bench moe: --ffn-ranks {} must divide --experts {} (each FFN rank holds E / R experts)",
                      o.ffn_ranks, o.experts);
        return core::kExitBadConfig;
    }
    if (o.ffn_ranks > 1 && !o.dump_routing_dir.empty()) {
        AFD_LOG_ERROR(
            "bench moe: --dump-routing writes a whole layer's routing for the peers; it needs --ffn-ranks 1 "
            "(got {})",
            o.ffn_ranks);
        return core::kExitBadConfig;
    }
    for (const kernels::MoeTileConfig tile : o.tiles) {
        if (tile != kernels::MoeTileConfig::kAuto && !kernels::moeTileFits(tile, o.hidden, o.inter)) {
            const kernels::MoeTileShape s = kernels::moeTileShape(tile);
            AFD_LOG_ERROR("bench moe: --tiles: {} needs --inter % {} == 0 and --hidden % {} == 0",
                          kernels::moeTileConfigName(tile), kernels::gateUpColumnsPerItem(s),
                          kernels::downRowsPerItem(s));
            return core::kExitBadConfig;
        }
    }
    flags.options.stages = !flags.no_stages;
    return runBenchBody("bench moe", [&] {
        const auto result = lab::runMoeBench(flags.options);
        printTable(result, flags.options);
        return flags.csv.empty() || writeCsv(flags.csv, result);
    });
}
#endif

}  // namespace

void addBenchMoeCommand(CLI::App& bench, int& exit_code) {
    CLI::App* moe = bench.add_subcommand("moe", "time the CUDA MoE layer against its floor and print a table");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchMoeFlags>();
    moe->add_option("--tokens", flags->options.tokens, "token counts T")->delimiter(',');
    moe->add_option("--routing", flags->options.routings,
                    "uniform, zipf and/or balanced (T K / E entries on every expert)")
        ->delimiter(',');
    moe->add_option("--tiles", flags->tiles, "tile configs to time in turn (" + tileNames() + ")")->delimiter(',');
    moe->add_option("--hidden", flags->options.hidden, "hidden size H (a multiple of 64)")
        ->check(CLI::Range(64, 1 << 16));
    moe->add_option("--inter", flags->options.inter, "expert intermediate size I (a multiple of 32)")
        ->check(CLI::Range(32, 1 << 16));
    moe->add_option("--experts", flags->options.experts, "experts E (at most 1024)")->check(CLI::Range(1, 1024));
    moe->add_option("--top-k", flags->options.top_k, "experts per token K (at most E)")->check(CLI::Range(1, 1024));
    moe->add_option("--zipf-exponent", flags->options.zipf_exponent, "exponent s of the zipf routing")
        ->check(CLI::Range(0.0, 16.0));
    moe->add_option("--layers", flags->options.layers, "weight sets rotated between replays")
        ->check(CLI::Range(1, 1024));
    moe->add_option("--reps", flags->options.reps, "timed graph replays per point")->check(CLI::Range(1, 1000000));
    addWarmupMsOption(*moe, flags->options.warmup_ms);
    moe->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    moe->add_option("--dump-routing", flags->options.dump_routing_dir,
                    "write each point's routing to this folder (read by bench/peers)");
    moe->add_flag("--no-stages", flags->no_stages, "do not time the four stages apart");
    moe->add_option("--ffn-ranks", flags->options.ffn_ranks,
                    "time FFN rank 0 of this many, which holds experts [0, E / R) and serves only their entries")
        ->check(CLI::Range(1, 1024));
    moe->add_option("--omit-stage", flags->options.omit_stage,
                    "diagnostic: time the layer without its permute or combine stage (what hiding it could gain)")
        ->check(CLI::IsMember({"permute", "combine"}));
    moe->callback([flags, &exit_code] { exit_code = runBenchMoe(*flags); });
#else
    moe->callback([&exit_code] {
        AFD_LOG_ERROR("bench moe: this afd was built without the CUDA backend");
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
