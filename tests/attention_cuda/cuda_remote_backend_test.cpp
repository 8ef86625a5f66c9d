// The GPU attention role: RemoteMlpBackend over CudaOps, with FFN ranks in a box (a connector that hands every
// dispatched frame to the GPU FFN rank's compute at once, as the TCP connector and FfnRunner would). m2n 1A2F (the
// router on the attention GPU, partial sums combined on the host; dense MLP layers on the attention GPU) and p2p 1A1F
// give the dense GPU engine's greedy ids (up to a near-tie of the dense engine's logits, where the partial sums' order
// may pick the runner-up), on the HF fixture and on generated checkpoints: with dense MLP layers, with MLP widths 16
// and 44 (packed padded on both roles' GPUs), with heads of head_dim 8 (stored padded to 16). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "attention/cuda/device_weights.h"
#include "attention/device_ops_factory.h"
#include "attention/remote_mlp_backend.h"
#include "attention_cuda/engine_test_util.h"
#include "common/subprocess_util.h"
#include "ffn/compute_factory.h"
#include "model/synthetic.h"
#include "transport/afd_wire.h"
#include "transport/topology.h"

namespace afd::attention::test {
namespace {

using core::DType;
using core::Tensor;

// FFN peers in a box: dispatch computes each peer's F2A rows at once (m2n: the peer's partial sums over its experts;
// p2p: the whole block), combine returns them.
class LoopbackFfnConnector : public transport::AttentionConnector {
public:
    LoopbackFfnConnector(transport::AfdMode mode, std::vector<std::unique_ptr<ffn::FfnCompute>> computes,
                         int64_t hidden)
        : mode_(mode), computes_(std::move(computes)), hidden_(hidden) {
        for (size_t k = 0; k < computes_.size(); ++k) {
            peers_.push_back({transport::Role::kFfn, static_cast<int>(k), "loopback:" + std::to_string(k)});
        }
        for (auto& stage : out_) stage.resize(computes_.size());
        for (auto& stage : frames_) stage.resize(computes_.size());
    }
    ~LoopbackFfnConnector() override {
        for (auto& c : computes_) c->release();
    }

    std::span<const transport::PeerInfo> peers() const override { return peers_; }
    core::Status sendStep(const transport::StepHeader& header) override {
        if ((header.flags & transport::kStepShutdown) != 0) ++shutdowns;
        return core::Status::ok();
    }
    core::Status dispatch(const transport::FrameKey& key, std::span<const transport::FramePayload> payloads) override {
        EXPECT_EQ(payloads.size(), computes_.size());
        for (size_t k = 0; k < payloads.size(); ++k) {
            const transport::FramePayload& p = payloads[k];
            const auto rows = static_cast<int64_t>(p.rows);
            std::vector<float>& out = out_[key.stage][k];
            out.assign(static_cast<size_t>(rows * hidden_), NAN);
            for (const Tensor& segment : p.segments) EXPECT_TRUE(segment.device().isCpu());
            const auto* x = static_cast<const float*>(p.segments[0].rawData());
            if (mode_ == transport::AfdMode::kM2n) {
                AFD_RETURN_IF_ERROR(
                    computes_[k]->moePartial(key.layer, rows, x, static_cast<const int32_t*>(p.segments[1].rawData()),
                                             static_cast<const float*>(p.segments[2].rawData()), out.data()));
            } else {
                AFD_RETURN_IF_ERROR(computes_[k]->mlpBlock(key.layer, rows, x, out.data()));
            }
            ++frames_served;
        }
        return core::Status::ok();
    }
    core::Result<std::span<const transport::ReceivedFrame>> combine(const transport::FrameKey& key,
                                                                    const transport::FrameSpec&) override {
        auto& frames = frames_[key.stage];
        for (size_t k = 0; k < frames.size(); ++k) {
            std::vector<float>& out = out_[key.stage][k];
            const auto rows = static_cast<int64_t>(out.size()) / hidden_;
            frames[k].rows = static_cast<uint32_t>(rows);
            frames[k].segments = {Tensor::view(out.data(), DType::kF32, {rows, hidden_})};
        }
        return std::span<const transport::ReceivedFrame>(frames);
    }
    void close() override {}

    int shutdowns = 0;
    int64_t frames_served = 0;

private:
    transport::AfdMode mode_;
    std::vector<std::unique_ptr<ffn::FfnCompute>> computes_;
    int64_t hidden_;
    std::vector<transport::PeerInfo> peers_;
    std::vector<std::vector<float>> out_[transport::kMaxStages];
    std::vector<transport::ReceivedFrame> frames_[transport::kMaxStages];
};

struct Case {
    std::string name;
    transport::AfdMode mode;
    int num_ffn_ranks;
    std::string generated;  // a generated checkpoint of tests/data/configs/<generated>.json; empty: the fixture
    bool dense_layers;      // the model has dense MLP layers (on the attention GPU in m2n)
};

class CudaRemoteBackendTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaRemoteBackendTest, GpuAttentionRoleGivesTheDenseGpuEnginesIds) {
    AFD_SKIP_WITHOUT_GPU();
    const Case& c = GetParam();
    testing::TempDir dir;
    std::string model_dir = kTinyDir + "/model";
    if (!c.generated.empty()) {
        auto config = model::ModelConfig::fromFile(std::string(AFD_TEST_DATA) + "/configs/" + c.generated + ".json");
        ASSERT_TRUE(config.isOk()) << config.status().toString();
        ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), *config, {.seed = 5}).isOk());
        model_dir = dir.path();
    }
    const HostModel host = loadHostModel(model_dir);
    const model::ModelConfig& config = host.config;
    const bool m2n = c.mode == transport::AfdMode::kM2n;
    ASSERT_EQ(config.numMoeLayers() < config.num_hidden_layers, c.dense_layers);

    // The attention rank's weights on the GPU (m2n: with the routers and dense MLPs; p2p: none of the MLP).
    auto attention_host = model::loadWeights(*host.checkpoint, config, model::WeightSelection::attentionRole(m2n));
    ASSERT_TRUE(attention_host.isOk()) << attention_host.status().toString();
    auto attention_weights = uploadModelWeights(config, *attention_host, 0);
    ASSERT_TRUE(attention_weights.isOk()) << attention_weights.status().toString();

    EngineOptions options;
    options.scheduler.max_model_len = 256;
    options.scheduler.max_num_batched_tokens = 96;  // chunked prefill with decodes mixed in
    // The GPU FFN ranks (their own weights, uploaded by the FFN compute).
    auto partition = transport::ExpertPartition::create(static_cast<int>(config.num_experts), c.num_ffn_ranks);
    ASSERT_TRUE(partition.isOk());
    std::vector<std::unique_ptr<ffn::FfnCompute>> computes;
    for (int k = 0; k < c.num_ffn_ranks; ++k) {
        const auto range = partition->rangeOf(k);
        const model::WeightSelection selection =
            m2n ? model::WeightSelection::ffnRole(true, config, range.begin, range.end)
                : model::WeightSelection::ffnRole(false, config, 0, config.num_experts);
        auto weights = model::loadWeights(*host.checkpoint, config, selection);
        ASSERT_TRUE(weights.isOk()) << weights.status().toString();
        auto compute = ffn::createFfnCompute("cuda", 0, config, std::move(weights).value(),
                                             options.scheduler.max_num_batched_tokens);
        ASSERT_TRUE(compute.isOk()) << compute.status().toString();
        computes.push_back(std::move(compute).value());
    }
    auto topology = transport::Topology::create(1, c.num_ffn_ranks, c.mode);
    ASSERT_TRUE(topology.isOk()) << topology.status().toString();
    LoopbackFfnConnector connector(c.mode, std::move(computes), config.hidden_size);

    std::vector<std::vector<int32_t>> prompts = {{3, 17, 99, 250, 7, 42, 311, 5}, {11}, {5, 6, 7}};
    for (int i = 0; i < 3; ++i) {
        std::vector<int32_t> p;
        for (int j = 0; j < 30 + 20 * i; ++j) p.push_back((j * 37 + i * 11) % static_cast<int>(config.vocab_size));
        prompts.push_back(std::move(p));
    }
    const auto requests = greedyRequests(prompts, 10);
    const model::ModelWeights dense_weights = uploadToGpu(host);
    const RunOutput want = runOnGpu(config, dense_weights, requests, options);

    auto ops = createDeviceOps(core::Device::cuda(0));
    ASSERT_TRUE(ops.isOk()) << ops.status().toString();
    RemoteMlpBackend backend(config, *attention_weights, c.mode, *topology, connector, **ops);
    EXPECT_FALSE(backend.capturable());
    auto engine = Engine::create(config, *attention_weights, **ops, backend, options);
    ASSERT_TRUE(engine.isOk()) << engine.status().toString();
    const RunOutput got = runRequests(**engine, requests, false);
    EXPECT_EQ(got.graph_replays, 0u);  // a host-driven backend never replays
    EXPECT_GT(connector.frames_served, 0);
    EXPECT_EQ(connector.shutdowns, 1);
    // The FFN ranks' partial sums are added in another order than the dense engine's one sum, which moves the logits
    // by rounding: the ids must be the dense engine's up to a step where the dense engine's top two logits lie within
    // kNearTie of each other and AFD picks the second; the comparison of that prompt ends there.
    constexpr float kNearTie = 0.05f;  // about a bf16 step of logits of magnitude 8
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto& g = got.ids[i];
        const auto& w = want.ids[i];
        ASSERT_EQ(g.size(), w.size()) << c.name << " prompt " << i;
        const auto diverge = std::mismatch(g.begin(), g.end(), w.begin());
        if (diverge.first == g.end()) continue;
        const auto step = static_cast<size_t>(diverge.first - g.begin());
        std::vector<int32_t> prefix = prompts[i];
        prefix.insert(prefix.end(), w.begin(), w.begin() + static_cast<std::ptrdiff_t>(step));
        const RunOutput at = runOnGpu(config, dense_weights, greedyRequests({prefix}, 1), options);
        const std::vector<float>& logits = at.prompt_logits[0];
        ASSERT_EQ(at.ids[0][0], w[step]) << c.name << " prompt " << i << ": the dense engine is not deterministic";
        const float top = logits[static_cast<size_t>(w[step])];
        const float picked = logits[static_cast<size_t>(g[step])];
        int above = 0;  // tokens the dense engine ranks above AFD's pick
        for (const float v : logits) above += v > picked ? 1 : 0;
        EXPECT_EQ(above, 1) << c.name << " prompt " << i << " step " << step << ": AFD picks a token the dense engine "
                            << "ranks below second";
        EXPECT_LE(top - picked, kNearTie)
            << c.name << " prompt " << i << " step " << step
            << ": AFD picks another token where the dense engine's margin is " << top - picked;
        std::printf("  %s prompt %zu step %zu: near-tie, dense margin %.4f\n", c.name.c_str(), i, step, top - picked);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CudaRemoteBackendTest,
    ::testing::Values(Case{"m2n_1a2f_fixture", transport::AfdMode::kM2n, 2, "", false},
                      Case{"p2p_1a1f_fixture", transport::AfdMode::kP2p, 1, "", false},
                      Case{"m2n_1a2f_dense_layers", transport::AfdMode::kM2n, 2, "sparse_step_2_mlp_only", true},
                      Case{"p2p_1a1f_dense_layers", transport::AfdMode::kP2p, 1, "sparse_step_2_mlp_only", true},
                      Case{"m2n_1a2f_narrow_widths", transport::AfdMode::kM2n, 2, "narrow_mlp_widths", true},
                      Case{"p2p_1a1f_narrow_widths", transport::AfdMode::kP2p, 1, "narrow_mlp_widths", true},
                      Case{"m2n_1a2f_head_dim_8", transport::AfdMode::kM2n, 2, "gqa_8to1", false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace afd::attention::test
