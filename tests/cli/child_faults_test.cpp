// A rank killed under a launcher, and a peer lost under `afd generate`: `afd launch` exits 3 naming the killed rank
// (never an internal error, even when the child's log is empty) and keeps its run directory, named in the error;
// `afd generate` prints what each prompt had, with finish_reason "error", and exits 3.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <signal.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "core/child_process.h"

namespace afd::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
const std::string kPrompt = "3,17,99,250,7,42,311,5";

std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> out;
    std::istringstream in(readText(fmt::format("/proc/{}/task/{}/children", pid, pid)));
    for (pid_t child; in >> child;) out.push_back(child);
    return out;
}

// The child of `parent` whose command line holds `needle` (0 when none does).
pid_t childWith(pid_t parent, const std::string& needle) {
    for (pid_t child : childrenOf(parent)) {
        std::string cmdline = readText(fmt::format("/proc/{}/cmdline", child));
        std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
        if (cmdline.find(needle) != std::string::npos) return child;
    }
    return 0;
}

// Until the FFN rank behind `port_file` reports served steps.
bool waitServing(const std::string& port_file, std::chrono::seconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string port = readText(port_file);
        if (!port.empty()) {
            const auto body = httpGet(std::stoi(port), "/status");
            const json s = json::parse(body.value_or("{}"), nullptr, false);
            if (!s.is_discarded() && s.value("steps", 0) > 2) return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

// `afd launch` of a long job (m2n, 1 attention rank, 2 FFN ranks) with TMPDIR in `tmp`.
core::ChildProcess startLongLaunch(const TempDir& tmp, const TempDir& logs) {
    core::ChildProcess::Spec spec;
    spec.argv = {AFD_BINARY, "launch",       "--model",      kTiny,   "--max-tokens",
                 "4000",     "--ignore-eos", "--prompt-ids", kPrompt, "--no-reference"};
    spec.env = {{"TMPDIR", tmp.path()}, {"AFD_NUM_THREADS", "1"}};
    spec.stdout_path = logs.file("launch.out");
    spec.stderr_path = logs.file("launch.err");
    return core::ChildProcess::spawn(spec).value();
}

// The one run directory the launcher made in `tmp` (empty when there is not exactly one).
std::string runDirIn(const TempDir& tmp) {
    std::vector<std::string> dirs;
    for (const auto& e : std::filesystem::directory_iterator(tmp.path())) dirs.push_back(e.path().string());
    return dirs.size() == 1 ? dirs[0] : "";
}

// Every file of a launcher's run directory (the ranks' logs, port and status files), for a failure's message.
std::string runDirContents(const std::string& run_dir) {
    std::string out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(run_dir, ec)) {
        if (!e.is_regular_file()) continue;
        out += fmt::format("==== {}\n{}\n", e.path().string(), readText(e.path().string()));
    }
    return out;
}

void expectLaunchReportsTheKilledRank(const std::string& child_needle, const std::string& rank_name) {
    TempDir tmp, logs;
    core::ChildProcess launch = startLongLaunch(tmp, logs);
    std::string run_dir;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (run_dir.empty() && std::chrono::steady_clock::now() < deadline) {
        run_dir = runDirIn(tmp);
        std::this_thread::sleep_for(10ms);
    }
    ASSERT_FALSE(run_dir.empty()) << readText(logs.file("launch.err"));
    ASSERT_TRUE(waitServing(run_dir + "/ffn1.port")) << "launch.err:\n"
                                                     << readText(logs.file("launch.err")) << runDirContents(run_dir);
    const pid_t victim = childWith(launch.pid(), child_needle);
    ASSERT_GT(victim, 0) << "no child with " << child_needle;
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    const auto code = launch.wait(30s);
    ASSERT_TRUE(code.has_value()) << "afd launch still running 30 s after a rank was killed";
    const std::string err = readText(logs.file("launch.err"));
    EXPECT_EQ(*code, 3) << err;
    EXPECT_EQ(err.find("internal error"), std::string::npos) << err;
    EXPECT_NE(err.find(rank_name + " was killed by signal 9"), std::string::npos) << err;
    // The run directory is kept for its logs, and named.
    EXPECT_TRUE(std::filesystem::is_directory(run_dir));
    EXPECT_NE(err.find("kept in " + run_dir), std::string::npos) << err;
}

TEST(ChildFaults, LaunchExitsThreeNamingAKilledFfnRank) { expectLaunchReportsTheKilledRank("ffn1.port", "ffn rank 1"); }

TEST(ChildFaults, LaunchExitsThreeNamingAKilledAttentionRank) {
    expectLaunchReportsTheKilledRank("generate", "attention rank 0");
}

TEST(ChildFaults, GeneratePrintsThePartialOutputWhenItsFfnPeerDies) {
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 1, true, freePort());
    FfnProcess ffn = startFfn(dir.path(), kTiny, cfg, 0, 1);
    ASSERT_GT(waitAdminPort(ffn), 0) << readText(ffn.log_path);
    AttentionProcess attention = startAttention(dir.path(), kTiny, cfg, 0, {kPrompt, "11,12,13"}, 4000,
                                                {"--ignore-eos", "--max-model-len", "4096"});
    ASSERT_TRUE(waitServing(ffn.port_path)) << readText(attention.log_path);
    ffn.process.signal(SIGKILL);
    const auto code = attention.process.wait(20s);
    ASSERT_TRUE(code.has_value()) << "afd generate still running 20 s after its FFN peer died";
    EXPECT_EQ(*code, 3) << readText(attention.log_path);
    const json out = json::parse(readText(attention.out_path), nullptr, false);
    ASSERT_FALSE(out.is_discarded()) << "no JSON on stdout: " << readText(attention.out_path);
    ASSERT_EQ(out["results"].size(), 2u) << out.dump();
    for (const auto& r : out["results"]) {
        EXPECT_EQ(r["finish_reason"], "error") << r.dump();
        EXPECT_GT(r["new_ids"].size(), 0u) << "the tokens generated before the peer died";
        EXPECT_LT(r["new_ids"].size(), 4000u);
    }
    EXPECT_EQ(out["results"][0]["prompt_ids"], (json{3, 17, 99, 250, 7, 42, 311, 5}));
    EXPECT_NE(out.value("error", "").find("ffn rank 0"), std::string::npos) << out.value("error", "");
}

}  // namespace
}  // namespace afd::testing
