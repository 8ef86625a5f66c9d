// An FFN pool on the GPU that outlives its attention sessions (`afd ffn --serve-sessions forever`), over the device
// connectors (skipped without a GPU; nccl needs two): each session makes its connector anew (cuda_ipc: new inboxes and
// IPC mappings; nccl: a new communicator), so generate after generate, and one after an attention rank killed
// mid-generation, gives the fixture's greedy ids.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#if defined(AFD_HAVE_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using afd::testing::readText;
using afd::testing::TempDir;
using nlohmann::json;

const std::string kFixture = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny";
const std::string kTiny = kFixture + "/model";

int visibleGpus() {
#if defined(AFD_HAVE_CUDA)
    return kernels::cuda::deviceCount();
#else
    return 0;
#endif
}

json statusOf(int port) {
    const json s = json::parse(afd::testing::httpGet(port, "/status").value_or("{}"), nullptr, false);
    return s.is_discarded() ? json::object() : s;
}

bool waitStatus(int port, const std::function<bool(const json&)>& holds, std::chrono::seconds timeout = 120s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        const json s = statusOf(port);
        if (!s.empty() && holds(s)) return true;
        std::this_thread::sleep_for(50ms);
    }
    return false;
}

bool waitIdle(int port, int finished, int failed) {
    return waitStatus(port, [&](const json& s) {
        return s.value("state", "") == "waiting_for_session" && s["sessions"].value("finished", -1) == finished &&
               s["sessions"].value("failed", -1) == failed;
    });
}

class PoolSessionsCuda : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (visibleGpus() == 0) GTEST_SKIP() << "no CUDA device";
        if (GetParam() == "nccl" && visibleGpus() < 2) GTEST_SKIP() << "nccl needs a GPU per rank: 2 GPUs";
        std::ifstream in(kFixture + "/expected.json");
        const json e = json::parse(in);
        for (const int32_t id : e.at("prompt_ids").get<std::vector<int32_t>>()) {
            prompt_ += (prompt_.empty() ? "" : ",") + std::to_string(id);
        }
        greedy_ = e.at("greedy_new_ids").get<std::vector<int32_t>>();
    }

    // The attention rank on GPU 0; the FFN rank on GPU 1 when there is one (else it shares GPU 0: cuda_ipc only).
    std::string ffnGpu() const { return visibleGpus() >= 2 ? "1" : "0"; }

    afd::testing::AttentionProcess attention(const std::string& dir, const std::string& cfg, int max_tokens,
                                             std::vector<std::string> extra = {}) {
        extra.insert(extra.end(), {"--device", "cuda", "--device-ids", "0", "--gpu-memory-utilization", "0.2"});
        return afd::testing::startAttention(dir, kTiny, cfg, 0, {prompt_}, max_tokens, extra);
    }

    std::vector<int32_t> generate(const std::string& dir, const std::string& cfg) {
        auto a = attention(dir, cfg, static_cast<int>(greedy_.size()));
        EXPECT_EQ(a.process.wait(180s).value_or(-1), 0) << readText(a.log_path);
        const json out = json::parse(readText(a.out_path), nullptr, false);
        if (out.is_discarded()) return {};
        return out["results"][0]["new_ids"].get<std::vector<int32_t>>();
    }

    std::string prompt_;
    std::vector<int32_t> greedy_;
};

TEST_P(PoolSessionsCuda, EachSessionMakesItsConnectorAnewAndGivesTheFixturesIds) {
    TempDir dir;
    const std::string cfg =
        afd::testing::afdConfigJson(1, 1, true, afd::testing::freePort(), "\"connector\":\"" + GetParam() + "\"");
    auto ffn = afd::testing::startFfn(dir.path(), kTiny, cfg, 0, 1, {"--device", "cuda", "--device-ids", ffnGpu()});
    ASSERT_GT(afd::testing::waitAdminPort(ffn, 120s), 0) << readText(ffn.log_path);
    for (int run = 1; run <= 2; ++run) {
        SCOPED_TRACE(run);
        EXPECT_EQ(generate(dir.path(), cfg), greedy_);
        ASSERT_TRUE(waitIdle(ffn.admin_port, run, 0)) << statusOf(ffn.admin_port).dump() << readText(ffn.log_path);
    }
    auto victim = attention(dir.path(), cfg, 4000, {"--ignore-eos", "--max-model-len", "4096"});
    const int64_t steps = statusOf(ffn.admin_port).value("steps", 0);
    ASSERT_TRUE(waitStatus(ffn.admin_port, [&](const json& s) {
        return s.value("state", "") == "serving" && s.value("steps", 0) > steps + 2;
    })) << readText(victim.log_path);
    victim.process.signal(SIGKILL);
    ASSERT_TRUE(victim.process.wait(20s).has_value());
    ASSERT_TRUE(waitIdle(ffn.admin_port, 2, 1)) << statusOf(ffn.admin_port).dump() << readText(ffn.log_path);
    EXPECT_EQ(generate(dir.path(), cfg), greedy_);
    ASSERT_TRUE(waitIdle(ffn.admin_port, 3, 1)) << readText(ffn.log_path);
    ASSERT_TRUE(afd::testing::httpPostStop(ffn.admin_port));
    ASSERT_EQ(ffn.process.wait(60s).value_or(-1), 0) << readText(ffn.log_path);
    const json status = json::parse(readText(ffn.status_path));
    EXPECT_EQ(status["exit_reason"], "stopped");
    EXPECT_TRUE(status["resources_released"].get<bool>()) << status.dump();
    const std::string released = GetParam() == "nccl" ? "nccl device buffers and communicators released"
                                                      : "cuda_ipc device buffers and IPC mappings released";
    EXPECT_NE(status["released"].get<std::string>().find(released), std::string::npos) << status.dump();
}

INSTANTIATE_TEST_SUITE_P(Connectors, PoolSessionsCuda, ::testing::Values("cuda_ipc", "nccl"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace afd::cli
