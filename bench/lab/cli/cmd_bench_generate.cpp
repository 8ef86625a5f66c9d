// `afd bench generate`: the dense GPU engine on random weights, decode steps and prefill timed against their floors
// (lab/cli/generate_bench.h). Flags are checked (exit 2) before any device is touched.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/device_flags.h"
#include "cli/model_loading.h"
#include "cli/model_source.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "lab/cli/bench_commands.h"
#include "lab/cli/bench_flag_checks.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include "lab/cli/generate_bench.h"
#endif

namespace afd::cli {
namespace {

constexpr const char* kCommand = "bench generate";

#if defined(AFD_HAVE_CUDA_ATTENTION)
struct BenchGenerateFlags {
    lab::GenerateBenchOptions options;
    ModelFlags model;
    std::vector<int64_t> batches;
    std::vector<int64_t> contexts;
    std::string csv;
    std::optional<std::string> additional_config;  // --additional-config: an AFD attention rank
};

// The points: --batch x --context when either is given (batch 1, 8, 32, 64, 128, 256 and context 1024 for the one not
// given); by default those six at context 1024, then context 8192 at batch 1 and 64.
std::vector<std::pair<int64_t, int64_t>> decodePoints(const BenchGenerateFlags& f) {
    const std::vector<int64_t> default_batches{1, 8, 32, 64, 128, 256};
    std::vector<std::pair<int64_t, int64_t>> points;
    if (f.batches.empty() && f.contexts.empty()) {
        for (const int64_t b : default_batches) points.emplace_back(b, 1024);
        points.emplace_back(1, 8192);
        points.emplace_back(64, 8192);
        return points;
    }
    const auto& batches = f.batches.empty() ? default_batches : f.batches;
    const std::vector<int64_t> contexts = f.contexts.empty() ? std::vector<int64_t>{1024} : f.contexts;
    for (const int64_t c : contexts) {
        for (const int64_t b : batches) points.emplace_back(b, c);
    }
    return points;
}

bool atLeastOne(const char* flag, const std::vector<int64_t>& values) {
    for (const int64_t v : values) {
        if (v < 1) {
            AFD_LOG_ERROR("{}: {}: {} must be >= 1", kCommand, flag, v);
            return false;
        }
    }
    return true;
}

bool checkFlags(const BenchGenerateFlags& f) {
    const auto& o = f.options;
    if (!atLeastOne("--batch", f.batches) || !atLeastOne("--context", f.contexts)) return false;
    if (o.block_size != 16 && o.block_size != 32 && o.block_size != 64 && o.block_size != 128) {
        AFD_LOG_ERROR("{}: --block-size: {} must be 16, 32, 64 or 128 (the paged attention kernels' block sizes)",
                      kCommand, o.block_size);
        return false;
    }
    int64_t max_batch = 1;
    for (const auto& [b, c] : o.points) max_batch = std::max(max_batch, b);
    const int64_t budget = std::max(o.max_num_batched_tokens, o.prefill_tokens);
    if (budget <= max_batch + 2) {
        AFD_LOG_ERROR("{}: --max-num-batched-tokens: {} must exceed the largest --batch {} by 3 or more", kCommand,
                      budget, max_batch);
        return false;
    }
    return true;
}

void printTable(const lab::GenerateBenchResult& r, const lab::GenerateBenchOptions& o) {
    fmt::print(
        "device: {}  copy {:.2f} TB/s (read+write)  bf16 gemm {:.0f} TFLOP/s (cuBLASLt 8192^3, after the "
        "warm-up)\n",
        r.device, r.copy_tbps, r.gemm_tflops);
    fmt::print("afd {}, {}; {:.1f} GB of weights on the device; {}\n", r.engine, r.model, r.weight_gb, r.graphs);
    fmt::print(
        "ms per engine step by the wall clock (decode: median of {} steps after {} warm-up; prefill: of {}); "
        "decode floor = bytes read / copy rate, prefill floor = FLOPs / GEMM rate\n",
        o.steps, o.warmup_steps, o.prefill_reps);
    fmt::print("{:>7} {:>5} {:>7} {:>8} {:>9} {:>8} {:>8} {:>10} {:>7} {:>8} {:>8} {:>8} {:>6} {:>7}\n", "kind",
               "batch", "context", "mean_ctx", "median_ms", "p10_ms", "p90_ms", "tok/s", "exp", "exp_src", "floor_GB",
               "floor_ms", "%floor", "TFLOP/s");
    for (const auto& row : r.rows) {
        const bool decode = row.kind == "decode";
        fmt::print(
            "{:>7} {:>5} {:>7} {:>8.0f} {:>9.3f} {:>8.3f} {:>8.3f} {:>10.0f} {:>7} {:>8} {:>8} {:>8.3f} {:>6.1f} "
            "{:>7}{}\n",
            row.kind, row.batch, row.context, row.mean_context, row.median_ms, row.p10_ms, row.p90_ms, row.tokens_per_s,
            decode ? fmt::format("{:.1f}", row.experts_per_layer) : "-", decode ? row.experts_source : "-",
            decode ? fmt::format("{:.2f}", row.floor_bytes / 1e9) : "-", row.floor_ms, row.pct_of_floor,
            decode ? "-" : fmt::format("{:.0f}", row.tflops),
            row.all_steps_pure ? "" : "  (some timed steps were not B decode rows)");
    }
}

bool writeCsv(const std::string& path, const lab::GenerateBenchResult& r) {
    const auto f = openBenchCsv(kCommand, path);
    if (f == nullptr) return false;
    fmt::print(f.get(),
               "impl,device,copy_tbps,gemm_tflops,kind,batch,context,mean_context,steps,median_ms,p10_ms,p90_ms,"
               "mean_ms,tokens_per_s,experts_per_layer,experts_uniform,experts_source,expert_bytes,weight_bytes,"
               "kv_bytes,floor_bytes,floor_ms,pct_of_floor,tflops,all_steps_pure,graphs\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(),
                   "afd,{},{:.3f},{:.1f},{},{},{},{:.1f},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.1f},{:.2f},{:.2f},{},{:.0f},"
                   "{:.0f},{:.0f},{:.0f},{:.4f},{:.2f},{:.1f},{},\"{}\"\n",
                   r.device, r.copy_tbps, r.gemm_tflops, row.kind, row.batch, row.context, row.mean_context, row.steps,
                   row.median_ms, row.p10_ms, row.p90_ms, row.mean_ms, row.tokens_per_s, row.experts_per_layer,
                   row.experts_uniform, row.experts_source, row.expert_bytes, row.weight_bytes, row.kv_bytes,
                   row.floor_bytes, row.floor_ms, row.pct_of_floor, row.tflops, row.all_steps_pure ? 1 : 0, r.graphs);
    }
    return true;
}

int runBenchGenerate(BenchGenerateFlags& flags) {
    flags.options.points = decodePoints(flags);
    if (!checkFlags(flags)) return core::kExitBadConfig;
    flags.model.random_weights = true;
    auto afd = transport::resolveAfdConfig(flags.additional_config, std::nullopt, transport::Role::kAttention);
    if (!afd.isOk()) {
        AFD_LOG_ERROR("{}: {}", kCommand, afd.status().message());
        return core::kExitBadConfig;
    }
    flags.options.afd = *afd;
    auto source = openModelSource(flags.model, "qwen3-30b-a3b");
    if (!source.isOk()) {
        AFD_LOG_ERROR("{}: {}", kCommand, source.status().message());
        return exitCodeFor(source.status());
    }
    if (visibleCudaDevices() == 0) {
        AFD_LOG_ERROR("{}: no CUDA device is visible", kCommand);
        return core::kExitFailure;
    }
    return runBenchBody(kCommand, [&] {
        auto result = lab::runGenerateBench(flags.options, std::move(source).value());
        if (!result.isOk()) {
            AFD_LOG_ERROR("{}: {}", kCommand, result.status().message());
            return false;
        }
        printTable(*result, flags.options);
        return flags.csv.empty() || writeCsv(flags.csv, *result);
    });
}
#endif

}  // namespace

void addBenchGenerateCommand(CLI::App& bench, int& exit_code) {
    CLI::App* cmd = bench.add_subcommand(
        "generate", "time the dense GPU engine's decode steps and prefill on random weights against their floors");
#if defined(AFD_HAVE_CUDA_ATTENTION)
    auto flags = std::make_shared<BenchGenerateFlags>();
    auto& o = flags->options;
    cmd->add_option("--config", flags->model.config_file,
                    "a config.json to take the shapes from (default: the qwen3-30b-a3b preset, "
                    "tests/data/qwen3-30b-a3b/config.json)");
    cmd->add_option("--preset", flags->model.preset, "tiny, small or qwen3-30b-a3b");
    cmd->add_option("--model", flags->model.model_dir, "a model directory whose config.json to take (no weights read)");
    cmd->add_option("--layers", flags->model.layers, "override num_hidden_layers")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    cmd->add_option("--seed", flags->model.weights_seed, "seed of the random weights (gen-model's values)");
    cmd->add_option("--batch", flags->batches, "decode batch sizes B (default 1,8,32,64,128,256)")->delimiter(',');
    cmd->add_option("--context", flags->contexts, "prompt lengths C of the decode points (default 1024)")
        ->delimiter(',');
    cmd->add_option("--steps", o.steps, "timed decode steps per point")->check(CLI::Range(1, 100000));
    cmd->add_option("--warmup-steps", o.warmup_steps, "decode steps before them, once every sequence decodes")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--prefill-tokens", o.prefill_tokens, "tokens of the prefill point, one step (0: none)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    cmd->add_option("--prefill-reps", o.prefill_reps, "timed prefills (after one warm-up)")->check(CLI::Range(1, 1000));
    cmd->add_option("--block-size", o.block_size, "KV cache block size in tokens (16, 32, 64 or 128)");
    cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                    "the engine's step budget: the prefill chunk while contexts are built")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    cmd->add_flag("--enforce-eager", o.enforce_eager, "no CUDA graphs: every decode step runs eagerly");
    cmd->add_option("--cuda-graph-max-batch-size", o.cuda_graph_max_batch_size,
                    "decode steps of more sequences run eagerly (0: the engine's default)")
        ->check(CLI::NonNegativeNumber);
    addWarmupMsOption(*cmd, o.warmup_ms);
    cmd->add_option("--additional-config", flags->additional_config,
                    "JSON with an \"afd\" object: time one AFD attention rank (start its FFN ranks with `afd ffn "
                    "--random-weights`, same config and seed) instead of the dense engine");
    cmd->add_flag("--dbo,--enable-dbo", o.dual_batch_overlap, "two-stage steps (dual-batch overlap)");
    cmd->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    cmd->callback([flags, &exit_code] { exit_code = runBenchGenerate(*flags); });
#else
    // Every flag of the CUDA build is taken (and ignored) here rather than passed up to afd's own options.
    cmd->fallthrough(false);
    cmd->allow_extras();
    cmd->callback([&exit_code] {
        AFD_LOG_ERROR("{}: this afd was built without the CUDA backend", kCommand);
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
