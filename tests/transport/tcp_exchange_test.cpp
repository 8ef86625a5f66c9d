// Whole engine-step exchanges over loopback TCP between attention and FFN ranks on threads of this process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "transport/exchange_test_util.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using namespace std::chrono_literals;
using namespace afd::transport::testing;

struct Results {
    std::vector<std::string> attention;
    std::vector<FfnLog> ffn;
};

// Runs the plan on every rank of `d` at once; attention rank i runs steps_per_rank[i] steps (all when empty).
Results runAll(Deployment& d, const ExchangePlan& plan, const std::vector<int>& steps_per_rank = {}) {
    std::vector<std::future<std::string>> attention;
    std::vector<std::future<FfnLog>> ffn;
    for (size_t f = 0; f < d.ffn.size(); ++f) {
        ffn.push_back(runAsync([&, f] { return runFfn(*d.ffn[f], static_cast<int>(f), plan); }));
    }
    for (size_t a = 0; a < d.attention.size(); ++a) {
        const int steps = steps_per_rank.empty() ? -1 : steps_per_rank[a];
        attention.push_back(
            runAsync([&, a, steps] { return runAttention(*d.attention[a], static_cast<int>(a), plan, steps); }));
    }
    Results r;
    for (auto& f : attention) r.attention.push_back(f.get());
    for (auto& f : ffn) r.ffn.push_back(f.get());
    return r;
}

std::vector<tcp::TcpConnectorOptions> m2nOptions(int num_attention, int num_ffn, uint32_t max_rows,
                                                 size_t max_frame_bytes) {
    const int port = pickFreePort();
    std::vector<tcp::TcpConnectorOptions> all;
    for (int f = 0; f < num_ffn; ++f) {
        auto o = baseOptions(Role::kFfn, f, num_attention, num_ffn, port);
        o.peers = allRanks(num_attention);
        all.push_back(o);
    }
    for (int a = 0; a < num_attention; ++a) {
        auto o = baseOptions(Role::kAttention, a, num_attention, num_ffn, port);
        o.peers = allRanks(num_ffn);
        all.push_back(o);
    }
    for (auto& o : all) {
        o.max_rows = max_rows;
        o.max_frame_bytes = max_frame_bytes;
    }
    return all;
}

ExchangePlan m2nPlan(uint32_t hidden, uint32_t top_k, uint32_t max_rows) {
    ExchangePlan plan;
    plan.steps = {{0, 1, kStepWarmup}, {1, 2, 0}, {2, 1, kStepCapture}, {3, 2, 0}};
    plan.layers = {0, 2, 3, 7};
    plan.a2f.segments = {{core::DType::kF32, hidden}, {core::DType::kI32, top_k}, {core::DType::kF32, top_k}};
    plan.f2a.segments = {{core::DType::kF32, hidden}};
    plan.max_rows = max_rows;
    return plan;
}

void expectClean(const Results& r, size_t num_steps) {
    for (size_t a = 0; a < r.attention.size(); ++a) EXPECT_EQ(r.attention[a], "") << "attention rank " << a;
    for (size_t f = 0; f < r.ffn.size(); ++f) {
        EXPECT_EQ(r.ffn[f].error, "") << "ffn rank " << f;
        EXPECT_TRUE(r.ffn[f].all_left) << "ffn rank " << f;
        EXPECT_EQ(r.ffn[f].steps.size(), num_steps) << "ffn rank " << f;
    }
}

TEST(TcpExchange, M2nTwoByTwoIsByteExactIncludingEmptyFrames) {
    const ExchangePlan plan = m2nPlan(64, 4, 24);
    // The plan has empty and non-empty frames both.
    int empty = 0, full = 0;
    for (const auto& s : plan.steps) {
        for (uint32_t l : plan.layers) {
            for (uint32_t st = 0; st < s.num_stages; ++st) {
                for (int a = 0; a < 2; ++a) {
                    for (int f = 0; f < 2; ++f) (planRows(plan, s.step, l, st, a, f) == 0 ? empty : full)++;
                }
            }
        }
    }
    ASSERT_GT(empty, 0);
    ASSERT_GT(full, 0);

    auto deployment = connectAll(m2nOptions(2, 2, plan.max_rows, plan.max_rows * plan.a2f.rowBytes()));
    ASSERT_TRUE(deployment.isOk()) << deployment.status().toString();
    EXPECT_EQ(deployment->attention[0]->peers()[1].rank, 1);
    EXPECT_EQ(deployment->attention[0]->peers()[1].role, Role::kFfn);
    EXPECT_EQ(deployment->ffn[1]->peers()[0].role, Role::kAttention);
    const Results r = runAll(*deployment, plan);
    expectClean(r, plan.steps.size());
}

TEST(TcpExchange, M2nOneStageAtATime) {
    ExchangePlan plan = m2nPlan(32, 2, 16);
    plan.dispatch_all_stages_first = false;
    auto deployment = connectAll(m2nOptions(2, 2, plan.max_rows, plan.max_rows * plan.a2f.rowBytes()));
    ASSERT_TRUE(deployment.isOk()) << deployment.status().toString();
    expectClean(runAll(*deployment, plan), plan.steps.size());
}

TEST(TcpExchange, P2pBlockMappingThreeAttentionTwoFfn) {
    constexpr int kA = 3, kF = 2;
    ExchangePlan plan;
    plan.steps = {{10, 1, 0}, {11, 2, 0}, {12, 1, kStepProfile}};
    plan.layers = {0, 1, 2};
    plan.a2f.segments = {{core::DType::kBf16, 96}};
    plan.f2a.segments = {{core::DType::kBf16, 96}};
    plan.max_rows = 20;
    const int port = pickFreePort();
    std::vector<tcp::TcpConnectorOptions> options;
    for (int f = 0; f < kF; ++f) options.push_back(baseOptions(Role::kFfn, f, kA, kF, port));
    for (int a = 0; a < kA; ++a) options.push_back(baseOptions(Role::kAttention, a, kA, kF, port));
    for (auto& o : options) {
        o.peers = p2pPeers(o.role, o.rank, kA, kF);
        o.max_rows = plan.max_rows;
        o.max_frame_bytes = plan.max_rows * plan.a2f.rowBytes();
    }
    auto deployment = connectAll(options);
    ASSERT_TRUE(deployment.isOk()) << deployment.status().toString();
    // {A0, A1} → F0 and {A2} → F1.
    ASSERT_EQ(deployment->ffn[0]->peers().size(), 2u);
    EXPECT_EQ(deployment->ffn[0]->peers()[1].rank, 1);
    ASSERT_EQ(deployment->ffn[1]->peers().size(), 1u);
    EXPECT_EQ(deployment->ffn[1]->peers()[0].rank, 2);
    ASSERT_EQ(deployment->attention[2]->peers().size(), 1u);
    EXPECT_EQ(deployment->attention[2]->peers()[0].rank, 1);
    expectClean(runAll(*deployment, plan), plan.steps.size());
}

TEST(TcpExchange, LargeFramesBothWaysWithTwoStagesInFlight) {
    // 4 MiB frames both ways between every pair, both stages dispatched before either is combined, so that ranks
    // write large frames while their peers write to them too. (tcp_raw_peer_test forces the write-write case
    // against a peer with tiny socket buffers.)
    ExchangePlan plan;
    plan.steps = {{0, 2, 0}};
    plan.layers = {0, 1};
    plan.a2f.segments = {{core::DType::kF32, 1024}};
    plan.f2a.segments = {{core::DType::kF32, 1024}};
    plan.max_rows = 1024;
    plan.full_rows = true;
    auto options = m2nOptions(2, 2, plan.max_rows, plan.max_rows * plan.a2f.rowBytes());
    for (auto& o : options) o.step_timeout = 30s;
    auto deployment = connectAll(options);
    ASSERT_TRUE(deployment.isOk()) << deployment.status().toString();
    expectClean(runAll(*deployment, plan), plan.steps.size());
}

TEST(TcpExchange, ShutdownPeersLeaveAndAllLeftIsReported) {
    ExchangePlan plan = m2nPlan(16, 2, 8);
    auto deployment = connectAll(m2nOptions(2, 1, plan.max_rows, plan.max_rows * plan.a2f.rowBytes()));
    ASSERT_TRUE(deployment.isOk()) << deployment.status().toString();
    // Attention rank 0 stops after one step, rank 1 after three.
    const Results r = runAll(*deployment, plan, {1, 3});
    EXPECT_EQ(r.attention[0], "");
    EXPECT_EQ(r.attention[1], "");
    const FfnLog& log = r.ffn[0];
    EXPECT_EQ(log.error, "");
    EXPECT_TRUE(log.all_left);
    ASSERT_EQ(log.steps, (std::vector<uint64_t>{0, 1, 2}));
    EXPECT_EQ(log.active[0], (std::vector<bool>{true, true}));
    EXPECT_EQ(log.active[1], (std::vector<bool>{false, true}));
    EXPECT_EQ(log.active[2], (std::vector<bool>{false, true}));
    // Once everyone has left, every later receiveStep says so again.
    auto again = deployment->ffn[0]->receiveStep();
    ASSERT_TRUE(again.isOk());
    EXPECT_TRUE(again->all_left);
}

}  // namespace
}  // namespace afd::transport
