// An FFN pool that outlives its attention sessions (`afd ffn --serve-sessions forever`, the default), as separate
// `afd` processes over loopback TCP: generate after generate against one pool gives the dense reference's tokens each
// time; an attention rank killed mid-generation fails only its session (counted, reported) and the next generate
// works; a second live process claiming a rank is refused; POST /stop and SIGTERM end the pool in every state with
// exit 0 and a status file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "core/prometheus_text.h"
#include "model/model_config.h"

namespace afd::ffn {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::afdConfigJson;
using testing::freePort;
using testing::readText;
using testing::TempDir;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
const std::string kFixturePrompt = "3,17,99,250,7,42,311,5";
const std::vector<std::string> kLongRun = {"--ignore-eos", "--max-model-len", "4096"};

json statusOf(int admin_port) {
    const json s = json::parse(testing::httpGet(admin_port, "/status").value_or("{}"), nullptr, false);
    return s.is_discarded() ? json::object() : s;
}

// Polls /status until `holds` is true of it (true) or 30 s pass (false).
bool waitStatus(int admin_port, const std::function<bool(const json&)>& holds) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        const json s = statusOf(admin_port);
        if (!s.empty() && holds(s)) return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

// The pool waits for its next session, `finished` and `failed` sessions behind it, registered in the next one (each
// session here is one rendezvous: numbered one after the other).
bool waitIdle(int admin_port, int finished, int failed) {
    return waitStatus(admin_port, [&](const json& s) {
        return s.value("state", "") == "waiting_for_session" && s["sessions"].value("finished", -1) == finished &&
               s["sessions"].value("failed", -1) == failed &&
               s["sessions"].value("current", -1) == finished + failed + 1;
    });
}

std::vector<int32_t> newIdsOf(const std::string& json_text) {
    const json out = json::parse(json_text, nullptr, false);
    if (out.is_discarded() || !out.contains("results")) return {};
    return out["results"][0]["new_ids"].get<std::vector<int32_t>>();
}

// The dense engine's greedy ids for the prompt (no AFD config: the whole model in one process).
std::vector<int32_t> denseIds(const std::string& prompt, int max_tokens) {
    const auto r = testing::runProcess({AFD_BINARY, "generate", "--model", kTiny, "--prompt-ids", prompt,
                                        "--max-tokens", std::to_string(max_tokens), "--json"},
                                       60s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return newIdsOf(r.out);
}

// A generate against the pool, to its end; its ids.
std::vector<int32_t> generateOnPool(const std::string& dir, const std::string& cfg, const std::string& prompt) {
    auto attention = testing::startAttention(dir, kTiny, cfg, 0, {prompt}, 12);
    const auto code = attention.process.wait(60s);
    EXPECT_EQ(code.value_or(-1), 0) << readText(attention.log_path);
    return newIdsOf(readText(attention.out_path));
}

double metric(int admin_port, const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels = {}) {
    return core::PrometheusText::parse(testing::httpGet(admin_port, "/metrics").value_or("")).sum(name, labels);
}

TEST(FfnPool, ServesGenerateAfterGenerateAKilledOneAndRefusesALiveDuplicate) {
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 2, true, freePort());
    const std::vector<int32_t> dense = denseIds(kFixturePrompt, 12);
    ASSERT_EQ(dense.size(), 12u);
    std::vector<testing::FfnProcess> ffn;
    for (int k = 0; k < 2; ++k) ffn.push_back(testing::startFfn(dir.path(), kTiny, cfg, k, 2));
    for (auto& f : ffn) ASSERT_GT(testing::waitAdminPort(f), 0) << readText(f.log_path);
    for (auto& f : ffn) {
        ASSERT_TRUE(waitIdle(f.admin_port, 0, 0)) << statusOf(f.admin_port).dump() << readText(f.log_path);
        EXPECT_EQ(testing::httpGet(f.admin_port, "/ready").value_or(""), "waiting_for_session\n");
        EXPECT_EQ(testing::httpGet(f.admin_port, "/health").value_or(""), "ok waiting_for_session\n");
        EXPECT_EQ(statusOf(f.admin_port)["serve_sessions"], "forever");
    }

    // Two generates in a row against the same pool, each a session of its own.
    for (int run = 1; run <= 2; ++run) {
        SCOPED_TRACE(run);
        EXPECT_EQ(generateOnPool(dir.path(), cfg, kFixturePrompt), dense);
        for (auto& f : ffn) ASSERT_TRUE(waitIdle(f.admin_port, run, 0)) << readText(f.log_path);
    }
    const json after_two = statusOf(ffn[0].admin_port);
    EXPECT_EQ(after_two["sessions"]["last"]["session"], 2);
    EXPECT_EQ(after_two["sessions"]["last"]["result"], "finished");
    EXPECT_EQ(after_two["sessions"]["current"], 3);  // open for the next one
    const int64_t steps_after_two = after_two.value("steps", 0);
    EXPECT_GT(steps_after_two, 0);

    // A long generation; a second process claiming its attention rank is refused while it lives.
    auto victim = testing::startAttention(dir.path(), kTiny, cfg, 0, {kFixturePrompt}, 4000, kLongRun);
    ASSERT_TRUE(waitStatus(ffn[0].admin_port, [&](const json& s) {
        return s.value("state", "") == "serving" && s.value("steps", 0) > steps_after_two + 2;
    })) << readText(victim.log_path);
    {
        TempDir other;  // its own output files
        auto duplicate = testing::startAttention(other.path(), kTiny, cfg, 0, {"11,12,13"}, 4);
        const auto code = duplicate.process.wait(60s);
        ASSERT_TRUE(code.has_value()) << "the duplicate claim was not refused";
        EXPECT_NE(*code, 0);
        const std::string log = readText(duplicate.log_path);
        EXPECT_NE(log.find("attention rank 0 is registered already"), std::string::npos) << log;
        EXPECT_NE(log.find("two processes claim the same rank"), std::string::npos) << log;
    }
    EXPECT_FALSE(victim.process.poll().has_value()) << "the first claimant is untouched";
    EXPECT_EQ(statusOf(ffn[0].admin_port).value("state", ""), "serving");

    // Killed mid-generation: its session fails on every FFN rank, which go back to waiting, and say so.
    victim.process.signal(SIGKILL);
    ASSERT_TRUE(victim.process.wait(10s).has_value());
    for (auto& f : ffn) {
        ASSERT_TRUE(waitIdle(f.admin_port, 2, 1)) << statusOf(f.admin_port).dump() << readText(f.log_path);
        EXPECT_FALSE(f.process.poll().has_value());
        const json s = statusOf(f.admin_port);
        EXPECT_EQ(s["sessions"]["last"]["session"], 3);
        EXPECT_EQ(s["sessions"]["last"]["result"], "failed");
        EXPECT_NE(s["sessions"]["last"]["error"].get<std::string>().find("attention rank 0"), std::string::npos)
            << s.dump();
        // The status file is written after each session too, while the rank runs.
        const json file = json::parse(readText(f.status_path), nullptr, false);
        ASSERT_FALSE(file.is_discarded()) << readText(f.status_path);
        EXPECT_EQ(file["state"], "waiting_for_session");
        EXPECT_EQ(file["exit_reason"], "");
        EXPECT_EQ(file["sessions"]["failed"], 1);
    }
    EXPECT_NE(readText(ffn[0].log_path).find("session 3 failed"), std::string::npos) << readText(ffn[0].log_path);

    // And the next generate works.
    EXPECT_EQ(generateOnPool(dir.path(), cfg, kFixturePrompt), dense);
    for (auto& f : ffn) {
        ASSERT_TRUE(waitIdle(f.admin_port, 3, 1)) << readText(f.log_path);
        EXPECT_EQ(metric(f.admin_port, "afd_ffn_sessions_total", {{"result", "finished"}}), 3);
        EXPECT_EQ(metric(f.admin_port, "afd_ffn_sessions_total", {{"result", "failed"}}), 1);
        EXPECT_EQ(metric(f.admin_port, "afd_ffn_session"), 5);
    }

    // POST /stop ends the pool while it waits (rank 1 first: rank 0 hosts the store rank 1 waits on).
    for (int k = 1; k >= 0; --k) {
        auto& f = ffn[static_cast<size_t>(k)];
        ASSERT_TRUE(testing::httpPostStop(f.admin_port));
        ASSERT_EQ(f.process.wait(20s).value_or(-1), 0) << readText(f.log_path);
        const json status = json::parse(readText(f.status_path));
        EXPECT_EQ(status["state"], "exited");
        EXPECT_EQ(status["exit_reason"], "stopped");
        EXPECT_EQ(status["exit_code"], 0);
        EXPECT_TRUE(status["resources_released"].get<bool>());
        EXPECT_EQ(status["serve_sessions"], "forever");
        EXPECT_EQ(status["sessions"]["finished"], 3);
        EXPECT_EQ(status["sessions"]["failed"], 1);
        EXPECT_GT(status["counters"]["steps"].get<int>(), steps_after_two);
    }
}

TEST(FfnPool, SigtermEndsThePoolBetweenSessionsAndPostStopMidSession) {
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 1, true, freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1);
    ASSERT_GT(testing::waitAdminPort(ffn), 0) << readText(ffn.log_path);
    EXPECT_FALSE(generateOnPool(dir.path(), cfg, kFixturePrompt).empty());
    ASSERT_TRUE(waitIdle(ffn.admin_port, 1, 0)) << readText(ffn.log_path);
    const auto signalled = std::chrono::steady_clock::now();
    ffn.process.signal(SIGTERM);
    ASSERT_EQ(ffn.process.wait(20s).value_or(-1), 0) << readText(ffn.log_path);
    EXPECT_LT(std::chrono::steady_clock::now() - signalled, 5s);
    json status = json::parse(readText(ffn.status_path));
    EXPECT_EQ(status["exit_reason"], "stopped");
    EXPECT_TRUE(status["resources_released"].get<bool>());
    EXPECT_NE(status["released"].get<std::string>().find("1 ended session(s): worker joined, connector closed"),
              std::string::npos)
        << status.dump();
    EXPECT_EQ(status["sessions"]["finished"], 1);

    // A fresh pool stopped while it serves: it finishes the step in flight, stops, and its peer fails.
    TempDir dir2;
    const std::string cfg2 = afdConfigJson(1, 1, true, freePort());
    auto pool = testing::startFfn(dir2.path(), kTiny, cfg2, 0, 1);
    ASSERT_GT(testing::waitAdminPort(pool), 0) << readText(pool.log_path);
    auto attention = testing::startAttention(dir2.path(), kTiny, cfg2, 0, {kFixturePrompt}, 4000, kLongRun);
    ASSERT_TRUE(waitStatus(pool.admin_port, [](const json& s) {
        return s.value("state", "") == "serving" && s.value("steps", 0) > 2;
    })) << readText(attention.log_path);
    ASSERT_TRUE(testing::httpPostStop(pool.admin_port));
    ASSERT_EQ(pool.process.wait(20s).value_or(-1), 0) << readText(pool.log_path);
    status = json::parse(readText(pool.status_path));
    EXPECT_EQ(status["exit_reason"], "stopped");
    EXPECT_TRUE(status["resources_released"].get<bool>());
    const auto code = attention.process.wait(20s);
    ASSERT_TRUE(code.has_value()) << "the attention rank outlived its stopped pool by 20 s";
    EXPECT_NE(*code, 0);
}

TEST(FfnPool, AP2pPoolCountsEachSessionsExpertTokensOnce) {
    // p2p: the FFN rank routes, and its compute's totals (from its start) feed the counters of each session's runner.
    auto config = model::ModelConfig::fromFile(kTiny + "/config.json");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < config->num_hidden_layers; ++l) moe_layers += config->isMoeLayer(l) ? 1 : 0;
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 1, false, freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1);
    ASSERT_GT(testing::waitAdminPort(ffn), 0) << readText(ffn.log_path);
    for (int run = 1; run <= 2; ++run) {
        SCOPED_TRACE(run);
        EXPECT_EQ(generateOnPool(dir.path(), cfg, kFixturePrompt).size(), 12u);
        ASSERT_TRUE(waitIdle(ffn.admin_port, run, 0)) << readText(ffn.log_path);
        // Between sessions: no runner renders, yet the last session's counts are in.
        const double tokens = metric(ffn.admin_port, "afd_ffn_tokens_total");
        EXPECT_GT(tokens, 0);
        EXPECT_EQ(metric(ffn.admin_port, "afd_ffn_expert_tokens_total"),
                  tokens * static_cast<double>(moe_layers * config->num_experts_per_tok));
    }
    ASSERT_TRUE(testing::httpPostStop(ffn.admin_port));
    EXPECT_EQ(ffn.process.wait(20s).value_or(-1), 0) << readText(ffn.log_path);
}

}  // namespace
}  // namespace afd::ffn
