// RemoteMlpBackend's device-generic path: activations that are not FP32 host tensors go through host staging by
// DeviceOps copies (with dtype conversion), and come back the same as the in-place FP32 host path gives them.
#include <gtest/gtest.h>

#include <random>

#include "attention/cpu_ops.h"
#include "attention/local_mlp_backend.h"
#include "attention/remote_mlp_backend.h"
#include "core/bf16.h"
#include "core/check.h"
#include "model/model_config.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

// An FFN peer in a box (p2p): every combine returns 2 x of what the matching dispatch sent.
class DoublingConnector : public transport::AttentionConnector {
public:
    DoublingConnector() { peers_.push_back({transport::Role::kFfn, 0, "fake:0"}); }
    std::span<const transport::PeerInfo> peers() const override { return peers_; }
    core::Status sendStep(const transport::StepHeader&) override {
        ++steps;
        return core::Status::ok();
    }
    core::Status dispatch(const transport::FrameKey& key, std::span<const transport::FramePayload> payloads) override {
        const Tensor& x = payloads[0].segments[0];
        EXPECT_EQ(x.dtype(), DType::kF32);
        EXPECT_TRUE(x.device().isCpu());
        auto& rows = sent_[key.stage];
        rows.assign(x.data<float>(), x.data<float>() + x.numel());
        for (auto& v : rows) v *= 2.0f;
        rows_[key.stage] = payloads[0].rows;
        return core::Status::ok();
    }
    core::Result<std::span<const transport::ReceivedFrame>> combine(const transport::FrameKey& key,
                                                                    const transport::FrameSpec& spec) override {
        const auto cols = static_cast<int64_t>(spec.segments[0].cols);
        frame_.rows = rows_[key.stage];
        frame_.segments = {Tensor::view(sent_[key.stage].data(), DType::kF32, {frame_.rows, cols})};
        return std::span<const transport::ReceivedFrame>(&frame_, 1);
    }
    void close() override {}
    int steps = 0;

private:
    std::vector<transport::PeerInfo> peers_;
    std::vector<float> sent_[2];
    uint32_t rows_[2] = {0, 0};
    transport::ReceivedFrame frame_;
};

// Host memory that claims BF16 activations, as a GPU's would be: the backend must stage and convert.
class Bf16HostOps final : public DeviceOps {
public:
    core::Device device() const override { return core::Device::cpu(); }
    core::DType activationDType() const override { return DType::kBf16; }
    void* stream() const override { return nullptr; }
    void reserve(const model::ModelConfig&, const StepLimits&) override {}
    Tensor empty(DType dtype, core::Shape shape) override { return cpu_.empty(dtype, std::move(shape)); }
    Tensor emptyHost(DType dtype, core::Shape shape) override {
        ++host_allocations;
        return cpu_.emptyHost(dtype, std::move(shape));
    }
    void copy(const Tensor& src, const Tensor& dst) override {
        ++copies;
        cpu_.copy(src, dst);
    }
    void synchronize() override {}
    void embedding(const Tensor&, const Tensor&, const Tensor&) override { AFD_FAIL("unused"); }
    void addRmsNorm(const Tensor&, const Tensor*, const Tensor*, const Tensor&, float, const Tensor&) override {
        AFD_FAIL("unused");
    }
    void rmsNormRows(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&) override { AFD_FAIL("unused"); }
    void linear(const Tensor&, const Tensor&, const Tensor*, const Tensor&) override { AFD_FAIL("unused"); }
    void qkvRopeKvWrite(const Tensor&, const Tensor*, const Tensor&, const Tensor&, float, const RopeTable&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
        AFD_FAIL("unused");
    }
    void attention(const Tensor&, const Tensor&, const Tensor&, const AttentionChunks&, float, const Tensor&) override {
        AFD_FAIL("unused");
    }
    void sample(const Tensor&, std::span<const SampleRequest>, std::span<int32_t>) override { AFD_FAIL("unused"); }
    int host_allocations = 0;
    int copies = 0;

private:
    CpuOps cpu_;
};

model::ModelConfig tinyConfig() {
    auto config = model::ModelConfig::fromFile(std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model/config.json");
    EXPECT_TRUE(config.isOk()) << config.status().toString();
    return std::move(config).value();
}

TEST(RemoteMlpBackend, StagesAndConvertsActivationsThatAreNotHostF32) {
    const model::ModelConfig config = tinyConfig();
    const int64_t H = config.hidden_size;
    const model::ModelWeights weights;  // p2p: the attention rank holds no MLP weights
    auto topology = transport::Topology::create(1, 1, transport::AfdMode::kP2p);
    ASSERT_TRUE(topology.isOk());
    std::mt19937 rng(6);
    std::normal_distribution<float> dist(0.0f, 1.0f);

    // Two stages of different sizes, BF16 "device" tensors.
    Bf16HostOps ops;
    DoublingConnector connector;
    RemoteMlpBackend backend(config, weights, transport::AfdMode::kP2p, *topology, connector, ops);
    EXPECT_FALSE(backend.capturable());
    const int64_t rows[2] = {3, 5};
    Tensor x[2], out[2];
    for (int s = 0; s < 2; ++s) {
        x[s] = Tensor::empty(DType::kBf16, {rows[s], H});
        out[s] = Tensor::empty(DType::kBf16, {rows[s], H});
        for (int64_t i = 0; i < x[s].numel(); ++i) x[s].data<core::Bf16>()[i] = core::Bf16(dist(rng));
    }
    ASSERT_TRUE(backend.beginStep({0, {rows[0], rows[1]}, false, {}}).isOk());
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(backend.submit(0, s, x[s], out[s]).isOk());
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(backend.collect(0, s).isOk());
    ASSERT_TRUE(backend.endStep().isOk());
    for (int s = 0; s < 2; ++s) {
        for (int64_t i = 0; i < x[s].numel(); ++i) {
            ASSERT_EQ(out[s].data<core::Bf16>()[i].bits, core::Bf16(2.0f * x[s].data<core::Bf16>()[i].toFloat()).bits)
                << "stage " << s << " element " << i;
        }
    }
    EXPECT_EQ(ops.copies, 4);            // x out and the result in, per stage
    EXPECT_EQ(ops.host_allocations, 2);  // the stages' input staging (the p2p result comes from the frame)

    // The FP32 host path (CpuOps) reads and writes in place and gives the same values.
    CpuOps cpu;
    DoublingConnector direct_connector;
    RemoteMlpBackend direct(config, weights, transport::AfdMode::kP2p, *topology, direct_connector, cpu);
    Tensor xf = Tensor::empty(DType::kF32, {rows[0], H});
    Tensor outf = Tensor::empty(DType::kF32, {rows[0], H});
    cpu.copy(x[0], xf);
    ASSERT_TRUE(direct.beginStep({1, {rows[0]}, false, {}}).isOk());
    ASSERT_TRUE(direct.submit(2, 0, xf, outf).isOk());
    ASSERT_TRUE(direct.collect(2, 0).isOk());
    for (int64_t i = 0; i < xf.numel(); ++i) ASSERT_EQ(outf.data<float>()[i], 2.0f * xf.data<float>()[i]);
    EXPECT_EQ(direct.layerTimings().size(), static_cast<size_t>(config.num_hidden_layers));
}

TEST(RemoteMlpBackend, SplitsTransfersIntoA2fAndF2aPerStepAndInTotal) {
    const model::ModelConfig config = tinyConfig();
    const model::ModelWeights weights;
    auto topology = transport::Topology::create(1, 1, transport::AfdMode::kP2p);
    ASSERT_TRUE(topology.isOk());
    CpuOps cpu;
    DoublingConnector connector;
    RemoteMlpBackend backend(config, weights, transport::AfdMode::kP2p, *topology, connector, cpu);
    const int64_t H = config.hidden_size;
    Tensor x = Tensor::empty(DType::kF32, {3, H});
    Tensor out = Tensor::empty(DType::kF32, {3, H});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7);
    auto runStep = [&](uint64_t step, std::initializer_list<int64_t> layers) {
        ASSERT_TRUE(backend.beginStep({step, {3}, false, {}}).isOk());
        for (int64_t layer : layers) {
            ASSERT_TRUE(backend.submit(layer, 0, x, out).isOk());
            ASSERT_TRUE(backend.collect(layer, 0).isOk());
        }
        ASSERT_TRUE(backend.endStep().isOk());
    };
    runStep(1, {0, 1});
    const auto L = static_cast<size_t>(config.num_hidden_layers);
    ASSERT_EQ(backend.stepLayerTimings().size(), L);
    for (size_t l = 0; l < L; ++l) {
        const auto& t = backend.stepLayerTimings()[l];
        EXPECT_EQ(t.num_crossings, l < 2 ? 1 : 0) << l;
        EXPECT_GE(t.send_seconds, 0.0);
        EXPECT_GE(t.receive_seconds, 0.0);
        EXPECT_DOUBLE_EQ(t.transfer_seconds, t.send_seconds + t.receive_seconds);
        if (l >= 2) {
            EXPECT_EQ(t.transfer_seconds, 0.0);
        }
    }
    const double step1_send = backend.stepLayerTimings()[0].send_seconds;
    // The next step starts its figures from zero; the totals keep adding up.
    runStep(2, {1});
    EXPECT_EQ(backend.stepLayerTimings()[0].num_crossings, 0);
    EXPECT_EQ(backend.stepLayerTimings()[0].send_seconds, 0.0);
    EXPECT_EQ(backend.stepLayerTimings()[1].num_crossings, 1);
    const auto totals = backend.layerTimings();
    EXPECT_EQ(totals[0].num_crossings, 1);
    EXPECT_EQ(totals[1].num_crossings, 2);
    EXPECT_DOUBLE_EQ(totals[0].send_seconds, step1_send);
    EXPECT_DOUBLE_EQ(totals[1].transfer_seconds, totals[1].send_seconds + totals[1].receive_seconds);
    EXPECT_GT(totals[1].send_seconds + totals[1].receive_seconds, 0.0);
}

TEST(LocalMlpBackend, IsCapturableAndMadeOnlyForTheHost) {
    const model::ModelConfig config = tinyConfig();
    const model::ModelWeights weights;
    CpuOps cpu;
    auto local = createLocalMlpBackend(config, weights, cpu);
    ASSERT_TRUE(local.isOk()) << local.status().toString();
    EXPECT_TRUE((*local)->capturable());
}

}  // namespace
}  // namespace afd::attention
