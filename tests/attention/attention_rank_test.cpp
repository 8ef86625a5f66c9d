// AttentionRank: the dense engine and an AFD attention rank assembled from a model source, their stages and teardown,
// and the AFD path through RemoteMlpBackend over a fake FFN peer (the whole MLP block of every layer, p2p) that can
// be lost mid-step.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <mutex>

#include "attention/attention_rank.h"
#include "attention/offline.h"
#include "attention/serving_test_util.h"
#include "kernels/mlp_block.h"
#include "transport/afd_wire.h"
#include "transport/connector_factory.h"

namespace afd::attention {
namespace {

using namespace std::chrono_literals;

SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

transport::AfdConfig afdConfig(const std::string& json) {
    auto afd = transport::AfdConfig::fromJson(json, transport::Role::kAttention, "test");
    AFD_CHECK_OK(afd.status());
    return *afd;
}

// What the fake FFN peer saw; outlives the connector (the rank owns and destroys that).
struct FakePeerLog {
    std::atomic<int> steps{0};
    std::atomic<int> shutdown_headers{0};
    std::atomic<bool> closed{false};
    std::atomic<bool> lose_next_step{false};  // the next step's combine of layer 1 finds the peer gone
};

// One FFN peer in p2p mode, in this process: the whole MLP block of each layer on the rows dispatched to it.
class FakeFfnPeer : public transport::AttentionConnector {
public:
    FakeFfnPeer(const test::HostModel& model, std::shared_ptr<FakePeerLog> log) : model_(model), log_(std::move(log)) {
        peers_.push_back({transport::Role::kFfn, 0, "fake:0"});
    }
    std::span<const transport::PeerInfo> peers() const override { return peers_; }
    core::Status sendStep(const transport::StepHeader& header) override {
        if (header.flags & transport::kStepShutdown) {
            ++log_->shutdown_headers;
        } else {
            ++log_->steps;
            losing_ = log_->lose_next_step.exchange(false);
        }
        return core::Status::ok();
    }
    core::Status dispatch(const transport::FrameKey& key, std::span<const transport::FramePayload> payloads) override {
        const core::Tensor& x = payloads[0].segments[0];
        const int64_t H = model_.config.hidden_size;
        const uint32_t rows = payloads[0].rows;
        auto& out = out_[key.stage];
        out.assign(static_cast<size_t>(rows) * static_cast<size_t>(H), 0.0f);
        if (rows > 0) {
            kernels::mlpBlockCpu(model_.config, model_.weights.mlp[key.layer], x.data<float>(), rows, out.data());
        }
        rows_[key.stage] = rows;
        return core::Status::ok();
    }
    core::Result<std::span<const transport::ReceivedFrame>> combine(const transport::FrameKey& key,
                                                                    const transport::FrameSpec& spec) override {
        if (losing_ && key.layer == 1) return core::peerLost("{}: connection reset by peer", peers_[0].describe());
        frame_.rows = rows_[key.stage];
        frame_.segments = {core::Tensor::view(out_[key.stage].data(), core::DType::kF32,
                                              {frame_.rows, static_cast<int64_t>(spec.segments[0].cols)})};
        return std::span<const transport::ReceivedFrame>(&frame_, 1);
    }
    void close() override { log_->closed = true; }

private:
    const test::HostModel& model_;
    std::shared_ptr<FakePeerLog> log_;
    std::vector<transport::PeerInfo> peers_;
    std::vector<float> out_[transport::kMaxStages];
    uint32_t rows_[transport::kMaxStages] = {};
    transport::ReceivedFrame frame_;
    bool losing_ = false;
};

AttentionRankOptions afdOverFakePeer(const test::HostModel& full, std::shared_ptr<FakePeerLog> log) {
    AttentionRankOptions o;
    o.engine = test::testEngineOptions(4, 64);
    o.afd = afdConfig(R"({"num_ffn_ranks":1,"compute_gate_on_attention":false,"max_num_tokens":256})");
    o.connector_factory = [&full, log](const transport::ConnectorRequest& request)
        -> core::Result<std::unique_ptr<transport::AttentionConnector>> {
        EXPECT_TRUE(transport::validateRequest(request).isOk()) << transport::validateRequest(request).toString();
        EXPECT_EQ(request.role, transport::Role::kAttention);
        EXPECT_EQ(request.peers(), std::vector<int>{0});
        EXPECT_EQ(request.afd.max_num_tokens, 256);
        EXPECT_EQ(request.hidden_size, full.config.hidden_size);
        EXPECT_TRUE(request.device.isCpu());
        EXPECT_NE(request.deploymentFingerprint().find("tcp/p2p/1A1F"), std::string::npos)
            << request.deploymentFingerprint();
        return std::unique_ptr<transport::AttentionConnector>(std::make_unique<FakeFfnPeer>(full, log));
    };
    return o;
}

const std::vector<std::vector<int32_t>> kPrompts = {
    {3, 17, 99, 250, 7, 42, 311, 5}, {11, 12, 13}, {200, 201, 202, 203, 204}, {9}};

TEST(AttentionRank, TheDenseEngineFromTheFixtureGivesTransformersIds) {
    std::ifstream in(std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/expected.json");
    const auto expected = nlohmann::json::parse(in);
    const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = expected["greedy_new_ids"].get<std::vector<int32_t>>();
    AttentionRankOptions o;
    o.engine = test::testEngineOptions();
    auto rank = AttentionRank::create(test::modelSource(test::fixtureModelDir()), std::move(o));
    ASSERT_TRUE(rank.isOk()) << rank.status().toString();
    EXPECT_EQ((*rank)->state(), AttentionRank::State::kReady);
    EXPECT_FALSE((*rank)->isAfd());
    EXPECT_EQ((*rank)->connector(), nullptr);
    auto results = generateOffline((*rank)->engine(), {prompt}, greedy(static_cast<int64_t>(want.size())), false);
    ASSERT_TRUE(results.isOk()) << results.status.toString();
    EXPECT_EQ(results.results[0].new_ids, want);
    EXPECT_TRUE((*rank)->shutdown(1s).isOk());
    EXPECT_EQ((*rank)->state(), AttentionRank::State::kStopped);
}

TEST(AttentionRank, StagesRunInOrderAndTheLoopServesFromTheRank) {
    const test::HostModel model = test::loadHostModel(test::generatedModelDir());
    const EngineOptions options = test::testEngineOptions(2, 16);
    AttentionRankOptions o;
    o.engine = options;
    auto rank = AttentionRank::configure(test::modelSource(test::generatedModelDir()), std::move(o));
    ASSERT_TRUE(rank.isOk()) << rank.status().toString();
    AttentionRank& r = **rank;
    EXPECT_EQ(r.state(), AttentionRank::State::kConfigured);
    ASSERT_TRUE(r.load().isOk());
    EXPECT_EQ(r.state(), AttentionRank::State::kLoaded);
    EXPECT_NE(r.weights().embed.rawData(), nullptr);
    ASSERT_TRUE(r.connect().isOk());
    ASSERT_TRUE(r.startEngine().isOk());
    EXPECT_EQ(r.state(), AttentionRank::State::kReady);
    EngineLoop& loop = r.startLoop();
    std::vector<SamplingParams> params;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        params.push_back(greedy(static_cast<int64_t>(4 + 3 * i)));
        auto s = loop.submit({kPrompts[i], params.back()});
        ASSERT_TRUE(s.isOk()) << s.status().toString();
        streams.push_back(*s);
    }
    const auto alone = test::idsAlone(model, kPrompts, params, options);
    for (size_t i = 0; i < streams.size(); ++i) {
        auto result = streams[i]->waitResult(30s);
        ASSERT_TRUE(result.has_value());
        EXPECT_EQ(result->output_ids, alone[i]) << "prompt " << i;
    }
    EXPECT_TRUE(r.shutdown(5s).isOk());
    EXPECT_EQ(r.loop(), nullptr);
    EXPECT_EQ(r.state(), AttentionRank::State::kStopped);
}

TEST(AttentionRank, ConfigureRefusesWhatCannotWorkNamingTheFlagOrKey) {
    struct Case {
        std::string name;
        std::function<void(ModelSource&, AttentionRankOptions&)> change;
        std::string needle;
    };
    const std::vector<Case> cases = {
        {"random weights on the CPU", [](ModelSource& s, AttentionRankOptions&) { s.random_weights = true; },
         "--random-weights"},
        {"bad engine options", [](ModelSource&, AttentionRankOptions& o) { o.engine.block_size = 0; }, "block_size"},
        {"rank out of range",
         [](ModelSource&, AttentionRankOptions& o) {
             o.afd = afdConfig(R"({"num_ffn_ranks":1})");
             o.attention_rank = 1;
         },
         "--attention-rank"},
        {"step larger than a frame",
         [](ModelSource&, AttentionRankOptions& o) { o.afd = afdConfig(R"({"max_num_tokens":1024})"); },
         "--max-num-batched-tokens"},
        {"more FFN ranks than experts",
         [](ModelSource&, AttentionRankOptions& o) { o.afd = afdConfig(R"({"num_ffn_ranks":9})"); },
         "afd.num_ffn_ranks"},
        {"nccl on the CPU (or unbuilt)",
         [](ModelSource&, AttentionRankOptions& o) { o.afd = afdConfig(R"({"connector":"nccl"})"); },
         transport::connectorCapabilities(transport::ConnectorKind::kNccl)
             ? std::string("afd.connector \"nccl\" moves device memory")
             : "afd.connector \"nccl\": this build's connectors are: " + transport::builtConnectorNames()},
        {"a connector the CPU cannot serve, even with a connector factory",
         [](ModelSource&, AttentionRankOptions& o) {
             o.afd = afdConfig(R"({"connector":"cuda_ipc"})");
             o.connector_factory = [](const transport::ConnectorRequest&)
                 -> core::Result<std::unique_ptr<transport::AttentionConnector>> {
                 return core::internalError("the factory must not be reached");
             };
         },
         transport::connectorCapabilities(transport::ConnectorKind::kCudaIpc)
             ? std::string("afd.connector \"cuda_ipc\" moves device memory")
             : std::string("afd.connector \"cuda_ipc\": this build's connectors are: tcp")},
    };
    for (const auto& c : cases) {
        ModelSource source = test::modelSource(test::fixtureModelDir());
        AttentionRankOptions o;
        o.engine = test::testEngineOptions();  // max_num_batched_tokens 2048
        c.change(source, o);
        auto rank = AttentionRank::configure(std::move(source), std::move(o));
        ASSERT_FALSE(rank.isOk()) << c.name;
        EXPECT_EQ(rank.status().code(), core::StatusCode::kInvalidArgument) << c.name;
        EXPECT_NE(rank.status().message().find(c.needle), std::string::npos)
            << c.name << ": " << rank.status().toString();
    }
}

TEST(AttentionRank, AfdOverAFakePeerGivesTheDenseIdsAndLeavesItOnShutdown) {
    const test::HostModel full = test::loadHostModel(test::fixtureModelDir());
    auto log = std::make_shared<FakePeerLog>();
    AttentionRankOptions o = afdOverFakePeer(full, log);
    const EngineOptions options = o.engine;
    auto rank = AttentionRank::create(test::modelSource(test::fixtureModelDir()), std::move(o));
    ASSERT_TRUE(rank.isOk()) << rank.status().toString();
    EXPECT_TRUE((*rank)->isAfd());
    ASSERT_NE((*rank)->connector(), nullptr);
    std::vector<SamplingParams> params(kPrompts.size(), greedy(9));
    const auto alone = test::idsAlone(full, kPrompts, params, options);
    auto results = generateOffline((*rank)->engine(), kPrompts, params[0], false);
    ASSERT_TRUE(results.isOk()) << results.status.toString();
    for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(results.results[i].new_ids, alone[i]) << "prompt " << i;
    EXPECT_GT(log->steps.load(), 0);
    EXPECT_EQ(log->shutdown_headers.load(), 1);  // generateOffline finished the engine
    EXPECT_TRUE((*rank)->shutdown(1s).isOk());
    EXPECT_TRUE(log->closed.load());
    EXPECT_EQ(log->shutdown_headers.load(), 1);
}

TEST(AttentionRank, AfdPeerLostMidStepFailsEveryRequestAndMarksTheEngineUnhealthy) {
    const test::HostModel full = test::loadHostModel(test::fixtureModelDir());
    auto log = std::make_shared<FakePeerLog>();
    AttentionRankOptions o = afdOverFakePeer(full, log);
    const EngineOptions options = o.engine;
    auto rank = AttentionRank::create(test::modelSource(test::fixtureModelDir()), std::move(o));
    ASSERT_TRUE(rank.isOk()) << rank.status().toString();
    EngineLoop& loop = (*rank)->startLoop();
    // Served through the loop first: the dense ids.
    std::vector<SamplingParams> params(kPrompts.size(), greedy(6));
    const auto alone = test::idsAlone(full, kPrompts, params, options);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : kPrompts) streams.push_back(*loop.submit({p, params[0]}));
    for (size_t i = 0; i < streams.size(); ++i) {
        auto r = streams[i]->waitResult(30s);
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->output_ids, alone[i]) << "prompt " << i;
    }
    // The peer is lost in the middle of the next step: every request in flight fails, naming the peer.
    log->lose_next_step = true;
    std::vector<std::shared_ptr<RequestStream>> doomed;
    for (const auto& p : kPrompts) doomed.push_back(*loop.submit({p, greedy(200)}));
    for (const auto& s : doomed) {
        auto r = s->waitResult(30s);
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->finish_reason, FinishReason::kError);
        EXPECT_EQ(r->error.code(), core::StatusCode::kPeerLost) << r->error.toString();
        EXPECT_NE(r->error.message().find("ffn rank 0"), std::string::npos) << r->error.toString();
    }
    const core::Status health = loop.health();
    EXPECT_EQ(health.code(), core::StatusCode::kPeerLost);
    EXPECT_NE(health.message().find("ffn rank 0"), std::string::npos) << health.toString();
    auto refused = loop.submit({kPrompts[0], greedy(2)});
    ASSERT_FALSE(refused.isOk());
    EXPECT_EQ(refused.status().code(), core::StatusCode::kPeerLost);
    const EngineLoopStats stats = loop.stats();
    EXPECT_EQ(stats.num_failed, kPrompts.size());
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    // Shutdown sends the peer nothing more (it is mid-step) and closes the connection.
    EXPECT_TRUE((*rank)->shutdown(5s).isOk());
    EXPECT_EQ(log->shutdown_headers.load(), 0);
    EXPECT_TRUE(log->closed.load());
}

}  // namespace
}  // namespace afd::attention
