// `afd bench moe` / `afd bench router` flags as a user passes them: every bad value ends with exit 2 and a message
// naming the flag, before any device is touched (so these run on machines without a GPU too). An afd built without
// the CUDA backend has no bench flags; there each subcommand must say so instead.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/subprocess_util.h"

namespace afd::cli {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;

#if defined(AFD_BINARY_HAS_CUDA)
void expectBadFlag(const std::vector<std::string>& args, const std::string& needle) {
    std::vector<std::string> argv{AFD_BINARY, "bench"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = runProcess(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST(BenchCli, RouterRefusesShapesTheRouterDoesNotTake) {
    expectBadFlag({"router", "--hidden", "100"}, "--hidden: 100 must be a multiple of 16");
    expectBadFlag({"router", "--experts", "257"}, "--experts: Value 257 not in range");
    expectBadFlag({"router", "--experts", "300"}, "--experts");
    expectBadFlag({"router", "--top-k", "40"}, "--top-k");
    expectBadFlag({"router", "--experts", "32", "--top-k", "32", "--tokens", "0"}, "--tokens: 0 must be >= 1");
    expectBadFlag({"router", "--weight-sets", "0"}, "--weight-sets");
}

TEST(BenchCli, MoeRefusesUnknownTilesRoutingsAndStages) {
    expectBadFlag({"moe", "--tiles", "wide999"}, "unknown tile config 'wide999'");
    expectBadFlag({"moe", "--tiles", "small32"}, "unknown tile config 'small32'");  // no longer in kMoeTiles
    expectBadFlag({"moe", "--tiles", "tall128", "--inter", "96"}, "--tiles: tall128 needs --inter % 128 == 0");
    expectBadFlag({"moe", "--routing", "gauss"}, "--routing: 'gauss'");
    expectBadFlag({"moe", "--omit-stage", "gate-up"}, "--omit-stage");
    expectBadFlag({"moe", "--tokens", "0"}, "--tokens: 0 must be >= 1");
}

TEST(BenchCli, MoeRefusesShapesAndCountsTheLayerDoesNotTake) {
    expectBadFlag({"moe", "--hidden", "100"}, "--hidden: 100 must be a multiple of 64");
    expectBadFlag({"moe", "--inter", "100"}, "--inter: 100 must be a multiple of 32");
    expectBadFlag({"moe", "--experts", "2000"}, "--experts");
    expectBadFlag({"moe", "--experts", "4", "--top-k", "8"}, "--top-k: 8 exceeds --experts 4");
    expectBadFlag({"moe", "--reps", "0"}, "--reps");
    expectBadFlag({"moe", "--layers", "0"}, "--layers");
    expectBadFlag({"moe", "--zipf-exponent", "-1"}, "--zipf-exponent");
    expectBadFlag({"moe", "--warmup-ms", "-1"}, "--warmup-ms");
    expectBadFlag({"router", "--warmup-ms", "-5"}, "--warmup-ms");
}

TEST(BenchCli, MoeRefusesFfnRanksThatDoNotSplitTheExperts) {
    expectBadFlag({"moe", "--ffn-ranks", "3"}, "--ffn-ranks 3 must divide --experts 128");
    expectBadFlag({"moe", "--ffn-ranks", "0"}, "--ffn-ranks");
    expectBadFlag({"moe", "--ffn-ranks", "2", "--dump-routing", "/tmp"}, "--dump-routing");
}
#else
// Without the CUDA backend each bench subcommand says so and exits 1.
TEST(BenchCli, SubcommandsSayTheCudaBackendIsMissing) {
    for (const char* sub : {"moe", "router"}) {
        const ProcessResult r = runProcess({AFD_BINARY, "bench", sub});
        EXPECT_EQ(r.exit_code, 1) << r.err;
        EXPECT_NE(r.err.find("built without the CUDA backend"), std::string::npos) << "stderr: " << r.err;
    }
}
#endif

}  // namespace
}  // namespace afd::cli
