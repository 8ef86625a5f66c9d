// `afd launch` on GPUs with its defaults (skipped without a GPU): every rank on a GPU runs over cuda_ipc, a mixed
// CPU/GPU deployment over tcp; ranks that share a GPU run under an MPS control daemon (one already running, else one
// the launch starts and stops, leaving no MPS process behind), or without one after --no-mps. Each gives the dense
// reference's tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/subprocess_util.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using afd::testing::ProcessResult;
using afd::testing::runProcess;
using afd::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

int visibleGpus() {
#if defined(AFD_HAVE_CUDA)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The process's state letter from /proc/PID/stat ('Z': a zombie, which a container without a reaping init keeps).
char processState(const std::string& proc_dir) {
    const std::string stat = readFile(proc_dir + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 'X';
}

// The pids of the MPS processes running on this machine (nvidia-cuda-mps-control and nvidia-cuda-mps-server; zombies
// are ended processes, not left ones).
std::set<long> mpsProcesses() {
    std::set<long> pids;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string comm = readFile(entry.path().string() + "/comm");
        const char state = processState(entry.path().string());
        if (comm.rfind("nvidia-cuda-mps", 0) == 0 && state != 'Z' && state != 'X') pids.insert(std::stol(name));
    }
    return pids;
}

// `afd launch` on the tiny fixture with a run directory of the test's; its --json report.
json launch(const std::vector<std::string>& extra, const std::string& run_dir, ProcessResult* result = nullptr) {
    std::vector<std::string> argv{AFD_BINARY,    "launch",       "--model",   kTiny,   "--max-tokens",
                                  "8",           "--json",       "--run-dir", run_dir, "--prompt-ids",
                                  "3,17,99,250", "--prompt-ids", "11,12"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const ProcessResult r = runProcess(argv, 300s);
    if (result != nullptr) *result = r;
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(out.is_discarded()) << r.out << r.err;
    if (out.is_discarded() || !out.contains("afd")) return json::object();
    EXPECT_TRUE(out["afd"].value("matches_dense_reference", false)) << out["afd"].dump();
    EXPECT_TRUE(out["afd"].value("clean_shutdown", false)) << out["afd"].dump();
    return out["afd"];
}

class LaunchMpsCuda : public ::testing::Test {
protected:
    void SetUp() override {
        if (visibleGpus() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_F(LaunchMpsCuda, RanksSharingAGpuRunOverCudaIpcUnderMpsAndNoMpsProcessIsLeft) {
    const std::set<long> before = mpsProcesses();
    TempDir run;
    const json afd = launch({"--device", "cuda", "--attention-device-ids", "0", "--ffn-device-ids", "0,0"}, run.path());
    EXPECT_EQ(afd.value("connector", ""), "cuda_ipc") << afd.dump();
    EXPECT_EQ(afd.value("shared_gpus", json::array()), json::array({0})) << afd.dump();
    const std::string mps = afd.value("mps", "");
    // "started" on a machine with nvidia-cuda-mps-control, "running" where a daemon ran already, "none" without one.
    EXPECT_TRUE(mps == "started" || mps == "running" || mps == "none") << afd.dump();
    if (mps == "started") {
        const std::set<long> after = mpsProcesses();
        EXPECT_TRUE(std::includes(before.begin(), before.end(), after.begin(), after.end()))
            << "MPS processes left by the launch: " << after.size() << " now, " << before.size() << " before";
        EXPECT_FALSE(fs::exists(run.file("mps/pipe/nvidia-cuda-mps-control.pid")));
    }
}

TEST_F(LaunchMpsCuda, NoMpsWarnsAndStillGivesTheReferenceTokens) {
    TempDir run;
    ProcessResult r;
    const json afd = launch({"--device", "cuda", "--attention-device-ids", "0", "--ffn-device-ids", "0,0", "--no-mps"},
                            run.path(), &r);
    EXPECT_EQ(afd.value("mps", ""), "none") << afd.dump();
    EXPECT_NE(r.err.find("time-slice"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--no-mps"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(run.file("mps")));
}

TEST_F(LaunchMpsCuda, TheUsersConnectorAndMixedDeploymentsStayOnTcp) {
    TempDir named, mixed;
    const json tcp =
        launch({"--device", "cuda", "--ffn-device-ids", "0,0", "--additional-config", R"({"afd":{"connector":"tcp"}})"},
               named.path());
    EXPECT_EQ(tcp.value("connector", ""), "tcp") << tcp.dump();
    // CPU attention, both FFN ranks on GPU 0: tcp, and the FFN ranks share GPU 0.
    const json cpu_attention = launch({"--ffn-device", "cuda", "--ffn-device-ids", "0,0"}, mixed.path());
    EXPECT_EQ(cpu_attention.value("connector", ""), "tcp") << cpu_attention.dump();
    EXPECT_EQ(cpu_attention.value("shared_gpus", json::array()), json::array({0})) << cpu_attention.dump();
}

}  // namespace
}  // namespace afd::cli
