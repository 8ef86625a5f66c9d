// `afd generate` with an AFD config whose FFN ranks are missing is not silent: every few seconds (5 s) it says what
// it waits for, and at the rendezvous timeout it exits with the lost-peer code (core/exit_codes.h).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "core/check.h"
#include "core/child_process.h"
#include "core/exit_codes.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using afd::testing::readText;
using afd::testing::TempDir;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
using Clock = std::chrono::steady_clock;

// {"afd": …} of 1 attention and 2 FFN ranks with the store at 127.0.0.1:port.
std::string config(int port, const std::string& role, int timeout_s) {
    return fmt::format(R"({{"afd":{{"role":"{}","num_attention_ranks":1,"num_ffn_ranks":2,"port":{},)"
                       R"("connect_timeout_s":{}}}}})",
                       role, port, timeout_s);
}

core::ChildProcess spawn(const std::vector<std::string>& argv, const std::string& log,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
    core::ChildProcess::Spec spec;
    spec.argv = argv;
    spec.env = env;
    spec.env.emplace_back("AFD_NUM_THREADS", "1");
    spec.stderr_path = log;
    spec.stdout_path = log + ".out";
    auto child = core::ChildProcess::spawn(spec);
    AFD_CHECK(child.isOk(), "{}", child.status().toString());
    return std::move(child).value();
}

// How long after `start` the file at `path` first held `needle`; nullopt when it did not within `timeout`.
std::optional<Clock::duration> waitForText(const std::string& path, const std::string& needle, Clock::time_point start,
                                           std::chrono::milliseconds timeout) {
    while (Clock::now() - start < timeout) {
        if (readText(path).find(needle) != std::string::npos) return Clock::now() - start;
        std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
}

// The rest of the line of `text` that holds `needle`, from `needle` on ("" when none does).
std::string lineFrom(const std::string& text, const std::string& needle) {
    const size_t at = text.find(needle);
    if (at == std::string::npos) return "";
    return text.substr(at, text.find('\n', at) - at);
}

// A report "… (5 s of 7 s …)": 5 s into the wait, give or take the rounding of a late wake-up ("5.1 s").
void expectFirstReport(const std::string& line, const std::string& rest) {
    EXPECT_TRUE(line.find("(5 s of " + rest) != std::string::npos ||
                line.find("(5.1 s of " + rest) != std::string::npos)
        << line;
}

std::vector<std::string> generateArgv(int port) {
    return {AFD_BINARY,
            "generate",
            "--model",
            kTiny,
            "--prompt-ids",
            "3,17",
            "--max-tokens",
            "2",
            "--additional-config",
            config(port, "attention", 7)};
}

TEST(WaitReportsCli, GenerateWithoutFfnRanksSaysWhatItWaitsForAndExitsThreeAtTheTimeout) {
    TempDir dir;
    const int port = afd::testing::freePort();
    const std::string log = dir.file("generate.log");
    const auto start = Clock::now();
    core::ChildProcess generate = spawn(generateArgv(port), log);
    const std::string needle = fmt::format(
        "waiting for the rendezvous store (ffn rank 0 hosts it) at 127.0.0.1:{} to accept a connection (", port);
    const auto seen = waitForText(log, needle, start, 10s);
    ASSERT_TRUE(seen.has_value()) << readText(log);
    EXPECT_LT(*seen, 7500ms) << "the first report comes 5 s into the wait (after the model loads)";
    expectFirstReport(lineFrom(readText(log), needle), "7 s; last error: Connection refused)");
    const auto code = generate.wait(20s);
    ASSERT_TRUE(code.has_value()) << readText(log);
    EXPECT_EQ(*code, core::kExitPeerLost) << readText(log);
    EXPECT_NE(readText(log).find(fmt::format("rendezvous at 127.0.0.1:{}: connecting to the rendezvous store (ffn rank "
                                             "0 hosts it) at 127.0.0.1:{}: no connection after 7",
                                             port, port)),
              std::string::npos)
        << readText(log);
}

TEST(WaitReportsCli, GenerateNamesTheFfnRankThatHasNotRegistered) {
    TempDir dir;
    const int port = afd::testing::freePort();
    // FFN rank 0 of 2 is up (it hosts the store, and waits longer than generate); rank 1 never comes.
    core::ChildProcess ffn = spawn({AFD_BINARY, "ffn", kTiny, "--additional-config", config(port, "ffn", 20)},
                                   dir.file("ffn0.log"), {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    ASSERT_TRUE(waitForText(dir.file("ffn0.log"), "rendezvous at", Clock::now(), 30s).has_value())
        << readText(dir.file("ffn0.log"));
    const std::string log = dir.file("generate.log");
    const auto start = Clock::now();
    core::ChildProcess generate = spawn(generateArgv(port), log);
    const std::string needle =
        fmt::format("attention rank 0: waiting for ffn rank 1 (of 2) to register at 127.0.0.1:{} (", port);
    const auto seen = waitForText(log, needle, start, 10s);
    ASSERT_TRUE(seen.has_value()) << readText(log);
    EXPECT_LT(*seen, 7500ms);
    expectFirstReport(lineFrom(readText(log), needle), "7 s)");
    const auto code = generate.wait(20s);
    ASSERT_TRUE(code.has_value()) << readText(log);
    EXPECT_EQ(*code, core::kExitPeerLost) << readText(log);
    EXPECT_NE(readText(log).find("ffn rank 1 never registered"), std::string::npos) << readText(log);
    // FFN rank 0 said the same about rank 1 (generate had registered by its first report).
    const std::string ffn_log = readText(dir.file("ffn0.log"));
    const std::string ffn_needle =
        fmt::format("ffn rank 0: waiting for ffn rank 1 (of 2) to register at 127.0.0.1:{} (", port);
    ASSERT_NE(ffn_log.find(ffn_needle), std::string::npos) << ffn_log;
    expectFirstReport(lineFrom(ffn_log, ffn_needle), "20 s)");
    ffn.signal(SIGTERM);
    EXPECT_EQ(ffn.wait(20s).value_or(-1), core::kExitOk) << readText(dir.file("ffn0.log"));
}

}  // namespace
}  // namespace afd::cli
