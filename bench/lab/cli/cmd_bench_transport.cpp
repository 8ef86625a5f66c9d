// `afd bench transport`: a device connector's per-layer round trip between two processes against the same bytes and
// flags within one process (lab/cli/transport_bench.h).
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "lab/cli/bench_commands.h"
#include "lab/cli/bench_flag_checks.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#include "lab/cli/transport_bench.h"
#endif

namespace afd::cli {
namespace {

constexpr const char* kCommand = "bench transport";

#if defined(AFD_HAVE_CUDA)
struct BenchTransportFlags {
    lab::TransportBenchOptions options;
    std::string role = "attention";
    std::string csv;
};

void printTable(const lab::TransportBenchResult& r, const lab::TransportBenchOptions& o) {
    fmt::print("device: {}; connector {} between two processes{}; {} crossings per step, {} timed steps\n", r.device,
               r.connector, r.mps ? " under MPS" : " WITHOUT MPS (time-sliced)", o.layers, o.steps);
    fmt::print(
        "one crossing = the m2n A2F frame (BF16 hidden {}, ids and weights of top-k {}) and the FP32 F2A frame\n",
        o.hidden, o.top_k);
    fmt::print("{:>6} {:>10} {:>10} {:>9} {:>9} {:>9} {:>10} {:>7}\n", "T", "a2f_KiB", "f2a_KiB", "afd_us", "p10_us",
               "p90_us", "local_us", "ratio");
    for (const auto& row : r.rows) {
        fmt::print("{:>6} {:>10.1f} {:>10.1f} {:>9.2f} {:>9.2f} {:>9.2f} {:>10.2f} {:>7.2f}\n", row.tokens,
                   row.a2f_bytes / 1024.0, row.f2a_bytes / 1024.0, row.afd_us, row.afd_p10_us, row.afd_p90_us,
                   row.local_us, row.local_us > 0 ? row.afd_us / row.local_us : 0.0);
    }
}

bool writeCsv(const std::string& path, const lab::TransportBenchResult& r) {
    const auto f = openBenchCsv(kCommand, path);
    if (f == nullptr) return false;
    fmt::print(f.get(), "device,connector,mps,tokens,a2f_bytes,f2a_bytes,afd_us,afd_p10_us,afd_p90_us,local_us\n");
    for (const auto& row : r.rows) {
        fmt::print(f.get(), "{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f}\n", r.device, r.connector, r.mps ? 1 : 0,
                   row.tokens, row.a2f_bytes, row.f2a_bytes, row.afd_us, row.afd_p10_us, row.afd_p90_us, row.local_us);
    }
    return true;
}

int runBenchTransport(BenchTransportFlags& flags) {
    if (!tokensAtLeastOne(kCommand, flags.options.tokens)) return core::kExitBadConfig;
    if (kernels::cuda::deviceCount() <= flags.options.gpu) {
        AFD_LOG_ERROR("{}: --gpu {}: no such CUDA device", kCommand, flags.options.gpu);
        return core::kExitBadConfig;
    }
    if (flags.role == "ffn") {
        const core::Status s = lab::serveTransportBench(flags.options);
        if (!s.isOk()) AFD_LOG_ERROR("{} (ffn): {}", kCommand, s.message());
        return s.isOk() ? core::kExitOk : core::kExitFailure;
    }
    return runBenchBody(kCommand, [&] {
        auto result = lab::runTransportBench(flags.options);
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

void addBenchTransportCommand(CLI::App& bench, int& exit_code) {
    CLI::App* cmd = bench.add_subcommand(
        "transport", "time a device connector's per-layer round trip between two processes against one process");
#if defined(AFD_HAVE_CUDA)
    auto flags = std::make_shared<BenchTransportFlags>();
    auto& o = flags->options;
    cmd->add_option("--connector", o.connector, "the device connector")->check(CLI::IsMember({"cuda_ipc"}));
    cmd->add_option("--tokens", o.tokens, "rows per frame T (default 1,2,4,...,256)")->delimiter(',');
    cmd->add_option("--layers", o.layers, "crossings per timed step")->check(CLI::Range(1, 100000));
    cmd->add_option("--steps", o.steps, "timed steps per T")->check(CLI::Range(1, 100000));
    cmd->add_option("--hidden", o.hidden, "hidden size H")->check(CLI::Range(int64_t{64}, int64_t{65536}));
    cmd->add_option("--top-k", o.top_k, "experts per token K")->check(CLI::Range(int64_t{1}, int64_t{32}));
    cmd->add_option("--gpu", o.gpu, "the GPU both processes use")->check(CLI::NonNegativeNumber);
    cmd->add_option("--port", o.port, "rendezvous port (default: a free one)")->check(CLI::Range(0, 65535));
    cmd->add_option("--role", flags->role, "attention (the benchmark) or ffn (its child)")
        ->check(CLI::IsMember({"attention", "ffn"}));
    cmd->add_option("--csv", flags->csv, "also write the rows to this CSV file");
    cmd->callback([flags, &exit_code] { exit_code = runBenchTransport(*flags); });
#else
    cmd->fallthrough(false);
    cmd->allow_extras();
    cmd->callback([&exit_code] {
        AFD_LOG_ERROR("{}: this afd was built without the CUDA backend", kCommand);
        exit_code = core::kExitFailure;
    });
#endif
}

}  // namespace afd::cli
