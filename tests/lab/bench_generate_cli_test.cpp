// `afd bench generate` flags as a user passes them: every bad value ends with exit 2 and a message naming the flag,
// before any device is touched (so these run on machines without a GPU too); without a GPU a good command says so
// (exit 1). An afd built without the CUDA backend says that instead.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/subprocess_util.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;

ProcessResult benchGenerate(const std::vector<std::string>& args) {
    std::vector<std::string> argv{AFD_BINARY, "bench", "generate"};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv);
}

TEST(BenchGenerateCli, IsListedUnderBench) {
    const ProcessResult r = runProcess({AFD_BINARY, "bench", "--help"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("generate"), std::string::npos) << r.out;
}

#if defined(AFD_BINARY_HAS_CUDA)
void expectBadFlag(const std::vector<std::string>& args, const std::string& needle) {
    const ProcessResult r = benchGenerate(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST(BenchGenerateCli, RefusesPointsAndCountsTheEngineDoesNotTake) {
    expectBadFlag({"--batch", "0"}, "--batch: 0 must be >= 1");
    expectBadFlag({"--context", "8,0"}, "--context: 0 must be >= 1");
    expectBadFlag({"--steps", "0"}, "--steps");
    expectBadFlag({"--warmup-steps", "0"}, "--warmup-steps");
    expectBadFlag({"--prefill-reps", "0"}, "--prefill-reps");
    expectBadFlag({"--prefill-tokens", "-1"}, "--prefill-tokens");
    expectBadFlag({"--block-size", "24"}, "--block-size: 24 must be 16, 32, 64 or 128");
    expectBadFlag({"--batch", "9000"}, "--max-num-batched-tokens: 8192 must exceed the largest --batch 9000");
    expectBadFlag({"--warmup-ms", "-1"}, "--warmup-ms");
}

TEST(BenchGenerateCli, RefusesModelSourcesThatDoNotGiveOneShape) {
    expectBadFlag({"--preset", "tiny", "--config", "x.json"}, "give one of --model, --config or --preset");
    const ProcessResult missing = benchGenerate({"--config", "/nonexistent/config.json"});
    EXPECT_EQ(missing.exit_code, 2) << missing.err;  // bad input found before any work
    EXPECT_NE(missing.err.find("/nonexistent/config.json"), std::string::npos) << missing.err;
}

TEST(BenchGenerateCli, WithoutAGpuAGoodCommandSaysSo) {
    if (kernels::cuda::deviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
    const ProcessResult r = benchGenerate({"--preset", "tiny", "--batch", "1", "--context", "16"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("bench generate: no CUDA device is visible"), std::string::npos) << r.err;
}
#else
TEST(BenchGenerateCli, SaysTheCudaBackendIsMissing) {
    const ProcessResult r = benchGenerate({"--batch", "1"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("built without the CUDA backend"), std::string::npos) << r.err;
}
#endif

}  // namespace
}  // namespace afd::cli
