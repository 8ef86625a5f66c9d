// Global flags anywhere on the command line, and AFD_LOG_LEVEL: --log-level before or after the subcommand, the
// environment when no flag is given, the flag over the environment, and a bad value of either refused with exit 2.
#include <gtest/gtest.h>

#include "common/subprocess_util.h"

namespace afd::testing {
namespace {

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

// A failing `afd generate` (no such model): its one error line shows whether errors are logged.
ProcessResult generateMissingModel(const std::vector<std::string>& before, const std::vector<std::string>& after,
                                   const std::string& env_level = "") {
    std::vector<std::string> argv = {"/usr/bin/env", "-u", "AFD_LOG_LEVEL"};
    if (!env_level.empty()) argv.push_back("AFD_LOG_LEVEL=" + env_level);
    argv.push_back(AFD_BINARY);
    for (const auto& a : before) argv.push_back(a);
    for (const auto& a : {"generate", "--model", "/nonexistent/afd-model", "--prompt-ids", "3"}) argv.push_back(a);
    for (const auto& a : after) argv.push_back(a);
    return runProcess(argv);
}

bool loggedTheError(const ProcessResult& r) { return r.err.find("/nonexistent/afd-model") != std::string::npos; }

TEST(GlobalFlags, LogLevelBeforeOrAfterTheSubcommand) {
    const ProcessResult before = generateMissingModel({"--log-level", "off"}, {});
    EXPECT_EQ(before.exit_code, 2) << before.err;
    EXPECT_FALSE(loggedTheError(before)) << before.err;
    const ProcessResult after = generateMissingModel({}, {"--log-level", "off"});
    EXPECT_EQ(after.exit_code, 2) << after.err;
    EXPECT_FALSE(loggedTheError(after)) << after.err;
    const ProcessResult shown = generateMissingModel({}, {"--log-level", "error"});
    EXPECT_EQ(shown.exit_code, 2);
    EXPECT_TRUE(loggedTheError(shown)) << shown.err;
}

TEST(GlobalFlags, LogLevelAfterTheSubcommandShowsDebugLines) {
    const ProcessResult r = runProcess({"/usr/bin/env", "-u", "AFD_LOG_LEVEL", AFD_BINARY, "generate", "--model", kTiny,
                                        "--prompt-ids", "3,17", "--max-tokens", "2", "--log-level", "debug"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(" D "), std::string::npos) << "no debug line: " << r.err;
}

TEST(GlobalFlags, AfdLogLevelIsHonouredAndTheFlagWins) {
    const ProcessResult quiet = generateMissingModel({}, {}, "off");
    EXPECT_EQ(quiet.exit_code, 2);
    EXPECT_FALSE(loggedTheError(quiet)) << quiet.err;
    const ProcessResult flag_wins = generateMissingModel({}, {"--log-level", "error"}, "off");
    EXPECT_EQ(flag_wins.exit_code, 2);
    EXPECT_TRUE(loggedTheError(flag_wins)) << flag_wins.err;
    const ProcessResult flag_wins_quiet = generateMissingModel({"--log-level", "off"}, {}, "debug");
    EXPECT_FALSE(loggedTheError(flag_wins_quiet)) << flag_wins_quiet.err;
}

TEST(GlobalFlags, BadLevelsAreRefusedWithExitTwo) {
    const ProcessResult bad_env = generateMissingModel({}, {}, "loud");
    EXPECT_EQ(bad_env.exit_code, 2);
    EXPECT_NE(bad_env.err.find("AFD_LOG_LEVEL"), std::string::npos) << bad_env.err;
    const ProcessResult bad_flag = generateMissingModel({}, {"--log-level", "loud"});
    EXPECT_EQ(bad_flag.exit_code, 2);
    EXPECT_NE(bad_flag.err.find("--log-level"), std::string::npos) << bad_flag.err;
}

}  // namespace
}  // namespace afd::testing
