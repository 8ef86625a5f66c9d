// What `afd bench`'s subcommands share: the checks of shape flags that CLI11 ranges cannot express (each logs
// "<command>: <flag>: <value> <rule>" and returns false when the value breaks its rule; the caller exits with
// kExitBadConfig), the warm-up option, the line stating the rates every floor is measured against, and the run of a
// benchmark with its table and CSV.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace afd::cli {

// --warmup-ms into `warmup_ms` (0 ... 60000; lab/bench_result.h, kSteadyStateWarmupMs).
void addWarmupMsOption(CLI::App& command, double& warmup_ms);

// "device: … copy … TB/s … bf16 gemm … TFLOP/s after the warm-up (… burst …)" on stdout.
void printBenchRates(const std::string& device, double copy_tbps, double gemm_tflops, double gemm_burst_tflops);

// `path` opened for writing a benchmark's CSV, or null after logging "<command>: cannot write <path>".
std::unique_ptr<FILE, int (*)(FILE*)> openBenchCsv(const char* command, const std::string& path);

// Runs `body` (the benchmark, its table and its CSV; false when the CSV could not be written) and returns the command's
// exit code: kExitOk, or kExitFailure for a false body or an exception, logged as "<command>: <what>".
int runBenchBody(const char* command, const std::function<bool()>& body);

bool tokensAtLeastOne(const char* command, const std::vector<int64_t>& tokens);
bool multipleOf(const char* command, const char* flag, int64_t value, int64_t multiple);
bool topKWithinExperts(const char* command, int64_t top_k, int64_t experts);

}  // namespace afd::cli
