// `afd bench moe`: the CUDA MoE layer timed on the device against its floor (kernels/cuda/moe_bench.h).
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_flag_checks.h"
#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/moe_bench.h"
#endif

namespace afd::cli {
namespace {

#if defined(AFD_HAVE_CUDA)
struct BenchMoeFlags {
    kernels::cuda::MoeBenchOptions options;
    std::vector<std::string> tiles{"auto"};
    std::string csv;
    bool no_stages = false;
    bool no_fuse_routing = false;
    bool static_schedule = false;
    bool late_release = false;
    bool no_down_prefetch = false;
    bool down_after_gate_up = false;
    bool no_gate_up_prefetch = false;
    bool gate_up_after_permute = false;
    bool token_gather = false;
    bool evict_first_weights = false;
    bool combine_after_down = false;
};

void printTable(const kernels::cuda::MoeBenchResult& r, const kernels::cuda::MoeBenchOptions& o) {
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
        if (!row.timeline.empty()) {
            fmt::print("{}", row.timeline);
        }
    }
}

bool writeCsv(const std::string& path, const kernels::cuda::MoeBenchResult& r) {
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
            AFD_LOG_ERROR(
                "bench moe: --tiles: unknown tile config '{}' (auto, tiny8, small16, small32, small64, small128, "
                "wide128, wide256, wide288, wide256g, tall128, tall128g, wide128pair, wide256pair)",
                name);
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
        AFD_LOG_ERROR("bench moe: --dump-routing writes a whole layer's routing for the peers; it needs --ffn-ranks 1 "
                      "(got {})",
                      o.ffn_ranks);
        return core::kExitBadConfig;
    }
    flags.options.stages = !flags.no_stages;
    flags.options.fuse_small_routing = !flags.no_fuse_routing;
    flags.options.dynamic_schedule = !flags.static_schedule;
    flags.options.early_stage_release = !flags.late_release;
    flags.options.down_prefetch = !flags.no_down_prefetch;
    flags.options.gate_up_prefetch = !flags.no_gate_up_prefetch;
    flags.options.gate_up_on_permute_words = !flags.gate_up_after_permute;
    flags.options.slot_gather = !flags.token_gather;
    flags.options.down_per_expert = !flags.down_after_gate_up;
    flags.options.shared_weights_in_l2 = !flags.evict_first_weights;
    flags.options.combine_by_part = !flags.combine_after_down;
    return runBenchBody("bench moe", [&] {
        const auto result = kernels::cuda::runMoeBench(flags.options);
        printTable(result, flags.options);
        return flags.csv.empty() || writeCsv(flags.csv, result);
    });
}
#endif

}  // namespace

void addBenchCommand(CLI::App& app, int& exit_code) {
    CLI::App* bench = app.add_subcommand("bench", "GPU benchmarks");
    bench->require_subcommand(1);
    CLI::App* moe = bench->add_subcommand("moe", "time the CUDA MoE layer against its floor and print a table");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchMoeFlags>();
    moe->add_option("--tokens", flags->options.tokens, "token counts T")->delimiter(',');
    moe->add_option("--routing", flags->options.routings,
                    "uniform, zipf and/or balanced (T K / E entries on every expert)")
        ->delimiter(',');
    moe->add_option("--tiles", flags->tiles, "tile configs to time (auto, small16 … wide256)")->delimiter(',');
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
    moe->add_flag("--no-fuse-routing", flags->no_fuse_routing,
                  "always run the permute kernel (no routing inside the GEMM kernels for small batches)");
    moe->add_option("--fuse-combine-entries", flags->options.fused_combine_entries,
                    "the down kernel does the combine up to this many routing entries (0: never; at most 256)")
        ->check(CLI::Range(0, 256));
    moe->add_flag("--static-schedule", flags->static_schedule,
                  "CTAs take their items in a fixed round robin (no device-wide item counter)");
    moe->add_flag("--late-release", flags->late_release,
                  "consumers release each stage after issuing the next stage's wgmma, for every tile");
    moe->add_option(
           "--early-release-up-to", flags->options.early_release_entries_per_expert,
           "consumers release each stage as soon as its wgmma retire up to this many routing entries per expert "
           "(0: never)")
        ->check(CLI::Range(0, 1 << 30));
    moe->add_flag("--no-down-prefetch", flags->no_down_prefetch,
                  "the down kernel issues no weight copies before the gate-up kernel has finished");
    moe->add_flag("--down-after-gate-up", flags->down_after_gate_up,
                  "the down kernel waits for the whole gate-up kernel (by default each down item waits only for the "
                  "gate-up items of its expert)");
    moe->add_flag(
        "--no-gate-up-prefetch", flags->no_gate_up_prefetch,
        "the wide128 gate-up kernel does not stream beside the gather kernel: it gathers its own token rows (or "
        "waits for the whole gather with --token-gather)");
    moe->add_flag("--gate-up-after-permute", flags->gate_up_after_permute,
                  "the gate-up kernels that gather their own rows wait for the permute's scatter grid (by default they "
                  "launch at its start and wait for the words it counts as its offsets and slots are written)");
    moe->add_flag(
        "--token-gather", flags->token_gather,
        "gather x in token order and wait for the whole gather (no slot-order gather by a kernel beside wide128 or by "
        "the other wide shapes' gate-up kernels)");
    moe->add_flag(
        "--evict-first-weights", flags->evict_first_weights,
        "copy every item's weights with evict_first when each weight tile is read about once (the wide shapes "
        "over 128 tokens and tall128 otherwise keep an expert's weights in L2 while its several token tiles read "
        "them)");
    moe->add_flag("--combine-after-down", flags->combine_after_down,
                  "the combine waits for the whole down kernel (by default, up to 64 routing entries per expert, the "
                  "down items go block of hidden rows by block and the combine sums each block once complete)");
    moe->add_option("--ffn-ranks", flags->options.ffn_ranks,
                    "time FFN rank 0 of this many, which holds experts [0, E / R) and serves only their entries")
        ->check(CLI::Range(1, 1024));
    moe->add_option("--omit-stage", flags->options.omit_stage,
                    "diagnostic: time the layer without its permute or combine stage (what hiding it could gain)")
        ->check(CLI::IsMember({"permute", "combine"}));
    moe->add_flag("--timeline", flags->options.timeline,
                  "trace one more replay per point: when the GEMM kernels' CTAs reach each step");
    moe->callback([flags, &exit_code] { exit_code = runBenchMoe(*flags); });
#else
    moe->callback([&exit_code] {
        AFD_LOG_ERROR("bench moe: this afd was built without the CUDA backend");
        exit_code = core::kExitFailure;
    });
#endif
    addBenchRouterCommand(*bench, exit_code);
    addBenchStreamCommand(*bench, exit_code);
}

}  // namespace afd::cli
