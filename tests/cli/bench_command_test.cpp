// `afd bench` exists in every build: with the benchmark lab (AFD_BUILD_BENCH) it lists the lab's benchmarks; without
// it, it says how to build them and exits 1, whatever flags follow, never with a parse error or a crash.
#include <gtest/gtest.h>

#include <string>

#include "common/subprocess_util.h"

namespace afd::cli {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;

#if defined(AFD_BINARY_HAS_LAB)
TEST(BenchCommand, ListsTheLabsBenchmarks) {
    const ProcessResult r = runProcess({AFD_BINARY, "bench", "--help"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* sub : {"moe", "router", "stream"}) {
        EXPECT_NE(r.out.find(sub), std::string::npos) << "`afd bench --help` does not list " << sub << ":\n" << r.out;
    }
}
#else
TEST(BenchCommand, SaysTheLabIsNotBuilt) {
    const ProcessResult r = runProcess({AFD_BINARY, "bench", "moe", "--tokens", "1"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find("-DAFD_BUILD_BENCH=ON"), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}
#endif

}  // namespace
}  // namespace afd::cli
