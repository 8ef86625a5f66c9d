// What `afd bench`'s subcommands share (bench_flag_checks.h).
#include "lab/cli/bench_flag_checks.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>

#include <exception>

#include "core/exit_codes.h"
#include "core/logging.h"

namespace afd::cli {

bool tokensAtLeastOne(const char* command, const std::vector<int64_t>& tokens) {
    for (const int64_t t : tokens) {
        if (t < 1) {
            AFD_LOG_ERROR("{}: --tokens: {} must be >= 1", command, t);
            return false;
        }
    }
    return true;
}

bool multipleOf(const char* command, const char* flag, int64_t value, int64_t multiple) {
    if (value % multiple != 0) {
        AFD_LOG_ERROR("{}: {}: {} must be a multiple of {}", command, flag, value, multiple);
        return false;
    }
    return true;
}

void addWarmupMsOption(CLI::App& command, double& warmup_ms) {
    command
        .add_option("--warmup-ms", warmup_ms,
                    "device time of warm-up replays before each timed series, the floors' rates included (0: burst, "
                    "the clocks right after idle; the default is the steady state under the power cap)")
        ->check(CLI::Range(0.0, 60000.0));
}

void printBenchRates(const std::string& device, double copy_tbps, double gemm_tflops, double gemm_burst_tflops) {
    fmt::print(
        "device: {}  copy {:.2f} TB/s (read+write)  bf16 gemm {:.0f} TFLOP/s after the warm-up ({:.0f} burst; "
        "cuBLAS 8192^3)\n",
        device, copy_tbps, gemm_tflops, gemm_burst_tflops);
}

std::unique_ptr<FILE, int (*)(FILE*)> openBenchCsv(const char* command, const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
    if (f == nullptr) {
        AFD_LOG_ERROR("{}: cannot write {}", command, path);
    }
    return f;
}

int runBenchBody(const char* command, const std::function<bool()>& body) {
    try {
        return body() ? core::kExitOk : core::kExitFailure;
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("{}: {}", command, e.what());
        return core::kExitFailure;
    }
}

bool topKWithinExperts(const char* command, int64_t top_k, int64_t experts) {
    if (top_k > experts) {
        AFD_LOG_ERROR("{}: --top-k: {} exceeds --experts {}", command, top_k, experts);
        return false;
    }
    return true;
}

}  // namespace afd::cli
