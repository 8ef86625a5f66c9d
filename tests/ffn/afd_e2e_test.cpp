// AFD end to end on CPU: FFN and attention ranks as separate `afd` processes over loopback TCP.
// Every topology must give the dense reference's and HF transformers' greedy tokens; failures (a rank killed,
// mismatched models, bad configs) must end every process with a clear error, never a hang.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "transport/connector_factory.h"

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
const std::vector<int32_t> kFixtureIds = {153, 379, 188, 113, 374, 186, 112, 186, 112, 358, 113, 250};
const std::vector<std::string> kOtherPrompts = {"11,12,13", "200,7", "5,6,7,8,9,10,11", "42"};

struct Topology {
    bool m2n;
    int A;
    int F;
};

std::string name(const Topology& t) { return fmt::format("{}_{}A{}F", t.m2n ? "m2n" : "p2p", t.A, t.F); }

class LaunchTopology : public ::testing::TestWithParam<Topology> {};

TEST_P(LaunchTopology, GreedyIdsMatchDenseAndTransformers) {
    const Topology t = GetParam();
    std::vector<std::string> argv = {AFD_BINARY,
                                     "launch",
                                     "--model",
                                     kTiny,
                                     "--max-tokens",
                                     "12",
                                     "--json",
                                     "--additional-config",
                                     fmt::format(R"({{"afd":{{"num_attention_ranks":{},"num_ffn_ranks":{},)"
                                                 R"("compute_gate_on_attention":{}}}}})",
                                                 t.A, t.F, t.m2n ? "true" : "false"),
                                     "--prompt-ids",
                                     kFixturePrompt};
    // One more prompt than ranks, so every attention rank has work and one has two sequences.
    for (int i = 0; i < t.A && i < static_cast<int>(kOtherPrompts.size()); ++i) {
        argv.push_back("--prompt-ids");
        argv.push_back(kOtherPrompts[static_cast<size_t>(i)]);
    }
    const auto r = testing::runProcess(argv, 120s);
    ASSERT_FALSE(r.timed_out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["results"][0]["new_ids"].get<std::vector<int32_t>>(), kFixtureIds);
    EXPECT_TRUE(out["afd"]["matches_dense_reference"].get<bool>());
    EXPECT_TRUE(out["afd"]["clean_shutdown"].get<bool>());
    EXPECT_EQ(out["afd"]["num_ffn_ranks"].get<int>(), t.F);
}

INSTANTIATE_TEST_SUITE_P(Afd, LaunchTopology,
                         ::testing::Values(Topology{true, 1, 1}, Topology{true, 2, 1}, Topology{true, 1, 2},
                                           Topology{true, 2, 2}, Topology{true, 3, 2}, Topology{true, 4, 3},
                                           Topology{false, 1, 1}, Topology{false, 2, 1}, Topology{false, 4, 2}),
                         [](const auto& info) { return name(info.param); });

TEST(AfdLaunch, DualBatchOverlapGivesTheSameTokens) {
    const auto r = testing::runProcess({AFD_BINARY, "launch", "--model", kTiny, "--max-tokens", "12", "--json", "--dbo",
                                        "--prompt-ids", kFixturePrompt, "--prompt-ids", "11,12,13"},
                                       120s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["results"][0]["new_ids"].get<std::vector<int32_t>>(), kFixtureIds);
    EXPECT_TRUE(out["afd"]["matches_dense_reference"].get<bool>());
}

std::vector<int32_t> newIdsOf(const std::string& json_path) {
    const json out = json::parse(readText(json_path));
    return out["results"][0]["new_ids"].get<std::vector<int32_t>>();
}

// Either start order: FFN ranks first, or attention ranks first (they wait in the rendezvous).
void runBothRoles(bool ffn_first) {
    TempDir dir;
    const std::string cfg = afdConfigJson(2, 2, true, freePort());
    std::vector<testing::FfnProcess> ffn;
    std::vector<testing::AttentionProcess> attention;
    auto startFfns = [&] {
        for (int k = 0; k < 2; ++k)
            ffn.push_back(testing::startFfn(dir.path(), kTiny, cfg, k, 2, testing::kOneSession));
    };
    auto startAttention = [&] {
        attention.push_back(testing::startAttention(dir.path(), kTiny, cfg, 0, {kFixturePrompt}, 12));
        attention.push_back(testing::startAttention(dir.path(), kTiny, cfg, 1, {"11,12,13"}, 12));
    };
    if (ffn_first) {
        startFfns();
        for (auto& f : ffn) ASSERT_GT(testing::waitAdminPort(f), 0) << readText(f.log_path);
        startAttention();
    } else {
        startAttention();
        std::this_thread::sleep_for(300ms);
        startFfns();
    }
    for (auto& a : attention) ASSERT_EQ(a.process.wait(60s), 0) << readText(a.log_path);
    EXPECT_EQ(newIdsOf(attention[0].out_path), kFixtureIds);
    for (size_t k = 0; k < ffn.size(); ++k) {
        auto& f = ffn[k];
        ASSERT_GT(testing::waitAdminPort(f), 0);
        // The session is over but the rank serves its admin endpoints until stopped.
        EXPECT_EQ(testing::httpGet(f.admin_port, "/health").value_or(""), "ok session_ended\n");
        EXPECT_EQ(testing::httpGet(f.admin_port, "/ready").value_or(""), "session_ended\n");
        const json status = json::parse(testing::httpGet(f.admin_port, "/status").value_or("{}"));
        EXPECT_EQ(status["role"], "ffn");
        EXPECT_EQ(status["rank"], static_cast<int>(k));
        EXPECT_EQ(status["state"], "session_ended");
        EXPECT_EQ(status["expert_range"], (json{4 * static_cast<int>(k), 4 * static_cast<int>(k) + 4}));
        EXPECT_GT(status["weight_bytes"].get<int64_t>(), 0);
        EXPECT_GT(status["steps"].get<int>(), 0);
        EXPECT_EQ(status["afd"]["num_ffn_ranks"], 2);
        const std::string metrics = testing::httpGet(f.admin_port, "/metrics").value_or("");
        EXPECT_NE(metrics.find("afd_ffn_steps_total "), std::string::npos) << metrics;
        EXPECT_NE(metrics.find("afd_ffn_tokens_total "), std::string::npos);
        EXPECT_NE(metrics.find("afd_ffn_layer_compute_seconds_total{layer=\"2\"}"), std::string::npos);
        EXPECT_NE(metrics.find("afd_ffn_layer_wait_seconds_total{layer=\"0\"}"), std::string::npos);
        EXPECT_TRUE(testing::httpPostStop(f.admin_port));
    }
    for (auto& f : ffn) {
        ASSERT_EQ(f.process.wait(20s), 0) << readText(f.log_path);
        const json status = json::parse(readText(f.status_path));
        EXPECT_EQ(status["exit_reason"], "stopped");
        EXPECT_TRUE(status["resources_released"].get<bool>());
        EXPECT_GT(status["counters"]["steps"].get<int>(), 0);
    }
}

TEST(AfdProcesses, FfnStartedFirst) { runBothRoles(true); }
TEST(AfdProcesses, AttentionStartedFirst) { runBothRoles(false); }

// Waits until the FFN rank reports served steps (the job is under way).
void waitServing(int admin_port) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto body = testing::httpGet(admin_port, "/status");
        if (body) {
            const json s = json::parse(*body, nullptr, false);
            if (!s.is_discarded() && s.value("steps", 0) > 2) return;
        }
        std::this_thread::sleep_for(20ms);
    }
    FAIL() << "the FFN rank never served a step";
}

const std::vector<std::string> kLongRun = {"--ignore-eos", "--max-model-len", "4096"};

TEST(AfdFailures, FfnKilledMidGenerationFailsEveryAttentionRank) {
    TempDir dir;
    const std::string cfg = afdConfigJson(2, 2, true, freePort());
    std::vector<testing::FfnProcess> ffn;
    for (int k = 0; k < 2; ++k) ffn.push_back(testing::startFfn(dir.path(), kTiny, cfg, k, 2, testing::kOneSession));
    for (auto& f : ffn) ASSERT_GT(testing::waitAdminPort(f), 0);
    std::vector<testing::AttentionProcess> attention;
    for (int a = 0; a < 2; ++a) {
        attention.push_back(testing::startAttention(dir.path(), kTiny, cfg, a, {kFixturePrompt}, 4000, kLongRun));
    }
    waitServing(ffn[1].admin_port);
    ffn[1].process.signal(SIGKILL);
    const auto killed_at = std::chrono::steady_clock::now();
    for (auto& a : attention) {
        const auto code = a.process.wait(10s);
        ASSERT_TRUE(code.has_value()) << "attention rank still running 10 s after the FFN rank died";
        EXPECT_NE(*code, 0);
        const std::string log = readText(a.log_path);
        EXPECT_NE(log.find("ffn rank 1"), std::string::npos) << log;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 10s);
    // The surviving FFN rank (one session) loses its attention peers and exits non-zero too.
    const auto code = ffn[0].process.wait(10s);
    ASSERT_TRUE(code.has_value());
    EXPECT_NE(*code, 0);
}

TEST(AfdFailures, AttentionKilledEndsOneSessionFfnRanksWithPeerLost) {
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 2, true, freePort());
    std::vector<testing::FfnProcess> ffn;
    for (int k = 0; k < 2; ++k) ffn.push_back(testing::startFfn(dir.path(), kTiny, cfg, k, 2, testing::kOneSession));
    for (auto& f : ffn) ASSERT_GT(testing::waitAdminPort(f), 0);
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kFixturePrompt}, 4000, kLongRun);
    waitServing(ffn[0].admin_port);
    EXPECT_EQ(testing::httpGet(ffn[0].admin_port, "/ready").value_or(""), "ready\n");
    attention.process.signal(SIGKILL);
    for (auto& f : ffn) {
        const auto code = f.process.wait(10s);
        ASSERT_TRUE(code.has_value()) << "FFN rank still running 10 s after its attention peer died";
        EXPECT_EQ(*code, 3) << readText(f.log_path);
        const json status = json::parse(readText(f.status_path));
        EXPECT_EQ(status["exit_reason"], "peer_lost");
        EXPECT_NE(status["error"].get<std::string>().find("attention rank 0"), std::string::npos);
    }
}

TEST(AfdFailures, SigtermStopsAnIdleFfnRankGracefully) {
    TempDir dir;
    const std::string cfg = afdConfigJson(1, 1, true, freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1);
    ASSERT_GT(testing::waitAdminPort(ffn), 0);
    ffn.process.signal(SIGTERM);  // still waiting for its attention peer in the rendezvous
    ASSERT_EQ(ffn.process.wait(20s), 0) << readText(ffn.log_path);
    const json status = json::parse(readText(ffn.status_path));
    EXPECT_EQ(status["exit_reason"], "stopped");
    EXPECT_TRUE(status["resources_released"].get<bool>());
}

TEST(AfdFailures, MismatchedModelsFailTheHandshakeOnBothSides) {
    TempDir dir;
    const std::string other = dir.path() + "/other";
    ASSERT_EQ(testing::runProcess({AFD_BINARY, "gen-model", "--preset", "tiny", "--out", other}).exit_code, 0);
    const std::string cfg = afdConfigJson(1, 1, true, freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1, testing::kOneSession);
    auto attention = testing::startAttention(dir.path(), other, cfg, 0, {"1,2,3"}, 4);
    const auto a_code = attention.process.wait(40s);
    const auto f_code = ffn.process.wait(40s);
    ASSERT_TRUE(a_code && f_code);
    EXPECT_NE(*a_code, 0);
    EXPECT_NE(*f_code, 0);
    for (const std::string& log : {readText(attention.log_path), readText(ffn.log_path)}) {
        EXPECT_NE(log.find("fingerprint"), std::string::npos) << log;
        // Both values are shown: the fixture has 3 layers, the generated tiny model 4.
        EXPECT_NE(log.find("L3 "), std::string::npos) << log;
        EXPECT_NE(log.find("L4 "), std::string::npos) << log;
    }
}

TEST(AfdFailures, BadConfigurationsExitTwoNamingTheKey) {
    struct Case {
        std::vector<std::string> argv;
        std::vector<std::pair<std::string, std::string>> env;
        std::string needle;
    };
    std::vector<Case> cases = {
        {{AFD_BINARY, "ffn", kTiny, "--additional-config", R"({"afd":{"num_ffn_ranks":1,"colour":"red"}})"},
         {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
         "colour"},
        {{AFD_BINARY, "ffn", kTiny, "--additional-config", R"({"afd":{"num_ffn_ranks":2}})"},
         {{"RANK", "0"}, {"WORLD_SIZE", "3"}},
         "WORLD_SIZE"},
        {{AFD_BINARY, "ffn", kTiny, "--additional-config", R"({"afd":{"port":70000}})"},
         {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
         "port"},
        {{AFD_BINARY, "ffn", kTiny, "--additional-config", R"({"afd":{"role":"attention"}})"},
         {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
         "role"},
        {{AFD_BINARY, "ffn", kTiny, "--additional-config", R"({"afd":{}})"}, {{"WORLD_SIZE", "1"}}, "RANK"},
        {{AFD_BINARY, "generate", "--model", kTiny, "--prompt-ids", "1", "--additional-config",
          R"({"afd":{"compute_gate_on_attention":false,"num_attention_ranks":1,"num_ffn_ranks":2}})"},
         {},
         "num_attention_ranks"},
        {{AFD_BINARY, "generate", "--model", kTiny, "--prompt-ids", "1", "--additional-config",
          R"({"afd":{"num_ffn_ranks":"two"}})"},
         {},
         "num_ffn_ranks"},
        {{AFD_BINARY, "launch", "--model", kTiny, "--additional-config", R"({"afd":{"role":"ffn"}})"}, {}, "role"},
    };
    // A connector this build lacks is refused before the model is opened: the model path does not exist (else
    // `afd generate` would exit 1 naming it, and `afd ffn` would name the directory).
    const std::string kNoModel = "/nonexistent/afd-model";
    for (const std::string connector : {"nccl", "cuda_ipc"}) {
        const std::string config = R"({"afd":{"connector":")" + connector + R"("}})";
        // Built or not, neither serves these CPU ranks.
        const std::string needle = transport::connectorCapabilities(*transport::parseConnector(connector))
                                       ? "afd.connector \"" + connector + "\" moves device memory"
                                       : "afd.connector \"" + connector +
                                             "\": this build's connectors are: " + transport::builtConnectorNames();
        cases.push_back({{AFD_BINARY, "ffn", kNoModel, "--additional-config", config},
                         {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
                         needle});
        if (transport::connectorCapabilities(*transport::parseConnector(connector))) {
            // More attention peers than a device connector's FFN rank gathers: refused by every role, before the
            // device and the model are looked at.
            const int too_many = transport::kMaxDevicePeers + 1;
            const std::string many =
                fmt::format(R"({{"afd":{{"connector":"{}","num_attention_ranks":{}}}}})", connector, too_many);
            const std::string rule = fmt::format("afd.num_attention_ranks {} with afd.num_ffn_ranks 1 (m2n)", too_many);
            cases.push_back({{AFD_BINARY, "ffn", kNoModel, "--additional-config", many},
                             {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
                             rule});
            cases.push_back({{AFD_BINARY, "generate", "--model", kNoModel, "--prompt-ids", "1", "--additional-config",
                              many, "--attention-rank", std::to_string(too_many - 1)},
                             {},
                             rule});
        }
        cases.push_back(
            {{AFD_BINARY, "generate", "--model", kNoModel, "--prompt-ids", "1", "--additional-config", config},
             {},
             needle});
    }
    for (const auto& c : cases) {
        core::ChildProcess::Spec spec;
        spec.argv = c.argv;
        spec.env = c.env;
        if (std::none_of(c.env.begin(), c.env.end(), [](const auto& kv) { return kv.first == "RANK"; })) {
            spec.unset_env.push_back("RANK");
        }
        TempDir dir;
        spec.stderr_path = dir.file("err");
        auto child = core::ChildProcess::spawn(spec);
        ASSERT_TRUE(child.isOk());
        const auto code = child->wait(30s);
        ASSERT_TRUE(code.has_value());
        const std::string err = readText(dir.file("err"));
        EXPECT_EQ(*code, 2) << c.argv[1] << ": " << err;
        EXPECT_NE(err.find(c.needle), std::string::npos) << err;
    }
}

}  // namespace
}  // namespace afd::ffn
