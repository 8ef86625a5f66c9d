// FfnRunner and FfnWorker against a scripted connector: row checks, expert-id checks, graceful stop of an idle
// loop through cancel(), and the loop's first error surfaced.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "core/metrics.h"
#include "ffn/cpu_ffn_compute.h"
#include "ffn/ffn_runner.h"
#include "ffn/ffn_worker.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "transport/afd_wire.h"

namespace afd::ffn {
namespace {

using namespace std::chrono_literals;

// One attention peer; steps and frames are queued by the test. receiveStep blocks until a step is queued or
// cancel() is called.
class ScriptedConnector : public transport::FfnConnector {
public:
    ScriptedConnector() { peers_.push_back({transport::Role::kAttention, 0, "test:0"}); }

    std::span<const transport::PeerInfo> peers() const override { return peers_; }

    core::Result<transport::StepInfo> receiveStep() override {
        std::unique_lock lock(mutex_);
        waiting_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return cancelled_ || !steps_.empty(); });
        waiting_ = false;
        if (cancelled_) return core::makeStatus(core::StatusCode::kCancelled, "cancelled");
        transport::StepInfo info = steps_.front();
        steps_.pop_front();
        return info;
    }
    core::Result<std::span<const transport::ReceivedFrame>> receive(const transport::FrameKey&,
                                                                    const transport::FrameSpec&) override {
        std::unique_lock lock(mutex_);
        if (hold_frames_) {  // a peer that stopped sending part-way through the step
            in_step_ = true;
            cv_.notify_all();
            cv_.wait(lock, [&] { return cancelled_; });
            return core::makeStatus(core::StatusCode::kCancelled, "the wait for test:0's frame was cancelled");
        }
        if (frames_.empty()) return core::peerLost("test:0 closed");
        current_ = {frames_.front()};
        frames_.pop_front();
        return std::span<const transport::ReceivedFrame>(current_);
    }
    core::Status send(const transport::FrameKey&, std::span<const transport::FramePayload> payloads) override {
        sent_rows_.push_back(payloads[0].rows);
        return core::Status::ok();
    }
    void cancel() override {
        std::lock_guard lock(mutex_);
        cancelled_ = true;
        cv_.notify_all();
    }
    void close() override {}

    void pushStep(transport::StepInfo info) {
        std::lock_guard lock(mutex_);
        steps_.push_back(std::move(info));
        cv_.notify_all();
    }
    void pushFrame(transport::ReceivedFrame frame) {
        std::lock_guard lock(mutex_);
        frames_.push_back(std::move(frame));
    }
    bool waitUntilWaiting(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return waiting_; });
    }

    bool waitUntilInStep(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return in_step_; });
    }
    void holdFrames() {
        std::lock_guard lock(mutex_);
        hold_frames_ = true;
    }

    std::vector<uint32_t> sent_rows_;

private:
    std::vector<transport::PeerInfo> peers_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool cancelled_ = false;
    bool waiting_ = false;
    bool hold_frames_ = false;
    bool in_step_ = false;
    std::deque<transport::StepInfo> steps_;
    std::deque<transport::ReceivedFrame> frames_;
    std::vector<transport::ReceivedFrame> current_;
};

transport::StepInfo stepOf(uint64_t step, uint32_t tokens) {
    transport::StepInfo info;
    info.step = step;
    info.num_stages = 1;
    info.peers.resize(1);
    info.peers[0].active = true;
    info.peers[0].stage_tokens[0] = tokens;
    return info;
}

class FfnRunnerTest : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string dir = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
        config_ = model::ModelConfig::fromFile(dir + "/config.json").value();
        auto checkpoint = model::Checkpoint::open(dir).value();
        compute_ = std::make_unique<CpuFfnCompute>(
            config_,
            model::loadWeights(checkpoint, config_, model::WeightSelection::ffnRole(true, config_, 0, 4)).value());
        runner_ = std::make_unique<FfnRunner>(config_, transport::AfdMode::kM2n, 4, *compute_, connector_, metrics_);
    }

    // An m2n frame of `rows` tokens whose first entry goes to local expert `id`.
    transport::ReceivedFrame frame(uint32_t rows, int32_t id) {
        const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
        hidden_.assign(static_cast<size_t>(rows * H), 0.5f);
        ids_.assign(static_cast<size_t>(rows * K), -1);
        weights_.assign(static_cast<size_t>(rows * K), 0.0f);
        for (uint32_t r = 0; r < rows; ++r) ids_[r * K] = id, weights_[r * K] = 1.0f;
        transport::ReceivedFrame f;
        f.rows = rows;
        f.segments = {core::Tensor::view(hidden_.data(), core::DType::kF32, {rows, H}),
                      core::Tensor::view(ids_.data(), core::DType::kI32, {rows, K}),
                      core::Tensor::view(weights_.data(), core::DType::kF32, {rows, K})};
        return f;
    }

    model::ModelConfig config_;
    std::unique_ptr<CpuFfnCompute> compute_;
    ScriptedConnector connector_;
    core::MetricsRegistry metrics_;
    std::unique_ptr<FfnRunner> runner_;
    std::vector<float> hidden_, weights_;
    std::vector<int32_t> ids_;
};

TEST_F(FfnRunnerTest, ServesEveryMoeLayerAndCountsTokens) {
    for (int l = 0; l < 3; ++l) connector_.pushFrame(frame(2, 1));
    ASSERT_TRUE(runner_->serve(stepOf(0, 3)).isOk());
    EXPECT_EQ(connector_.sent_rows_, (std::vector<uint32_t>{2, 2, 2}));
    EXPECT_EQ(runner_->stats().steps, 1u);
    EXPECT_EQ(runner_->stats().tokens, 3u);
}

TEST_F(FfnRunnerTest, CountsTheTokensOfEachExpertFromTheFramesIds) {
    for (int l = 0; l < 3; ++l) connector_.pushFrame(frame(2, 1));
    ASSERT_TRUE(runner_->serve(stepOf(0, 3)).isOk());
    const std::string text = metrics_.render();
    // Two rows to local expert 1 in each of the 3 MoE layers; one series per expert of the rank, at 0 when unused.
    EXPECT_NE(text.find("afd_ffn_expert_tokens_total{expert=\"1\"} 6\n"), std::string::npos) << text;
    for (const char* idle : {"0", "2", "3"}) {
        EXPECT_NE(text.find(fmt::format("afd_ffn_expert_tokens_total{{expert=\"{}\"}} 0\n", idle)), std::string::npos)
            << text;
    }
    EXPECT_EQ(text.find("afd_ffn_expert_tokens_total{expert=\"4\"}"), std::string::npos) << text;
    // A rank whose range starts at expert 4 labels its local id 1 as expert 5.
    core::MetricsRegistry other;
    FfnRunner second(config_, transport::AfdMode::kM2n, 4, *compute_, connector_, other, /*expert_begin=*/4);
    for (int l = 0; l < 3; ++l) connector_.pushFrame(frame(1, 1));
    ASSERT_TRUE(second.serve(stepOf(1, 1)).isOk());
    EXPECT_NE(other.render().find("afd_ffn_expert_tokens_total{expert=\"5\"} 3\n"), std::string::npos)
        << other.render();
}

TEST_F(FfnRunnerTest, RefusesMoreRowsThanTheStepHeaderAnnounced) {
    connector_.pushFrame(frame(4, 1));
    const core::Status s = runner_->serve(stepOf(0, 3));
    EXPECT_EQ(s.code(), core::StatusCode::kMismatch);
    EXPECT_NE(s.message().find("attention rank 0"), std::string::npos) << s.message();
}

TEST_F(FfnRunnerTest, RefusesExpertIdsOutsideTheRankRange) {
    connector_.pushFrame(frame(1, 4));  // this rank holds 4 experts: valid local ids are -1..3
    const core::Status s = runner_->serve(stepOf(0, 1));
    EXPECT_EQ(s.code(), core::StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("expert id 4"), std::string::npos) << s.message();
}

TEST_F(FfnRunnerTest, WorkerStopCancelsAnIdleWaitAndEndsStopped) {
    bool ended = false;
    FfnWorker worker(*runner_, connector_, [&] { ended = true; });
    worker.start();
    ASSERT_TRUE(connector_.waitUntilWaiting(5s));
    const auto start = std::chrono::steady_clock::now();
    worker.requestStop();
    ASSERT_TRUE(worker.join(5s));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
    EXPECT_EQ(worker.end(), WorkerEnd::kStopped);
    EXPECT_TRUE(worker.error().isOk());
    EXPECT_TRUE(ended);
}

TEST_F(FfnRunnerTest, WorkerStopCancelsAStepWhoseFramesStopComingAfterTheGrace) {
    FfnWorker worker(*runner_, connector_, {});
    worker.start();
    connector_.holdFrames();
    connector_.pushStep(stepOf(0, 1));
    ASSERT_TRUE(connector_.waitUntilInStep(5s));
    const auto start = std::chrono::steady_clock::now();
    worker.requestStop();
    // The step in flight is not cancelled at once (a healthy one would finish), but after the grace.
    ASSERT_TRUE(worker.join(FfnWorker::kStepGrace + 10s));
    EXPECT_GE(std::chrono::steady_clock::now() - start, FfnWorker::kStepGrace);
    EXPECT_EQ(worker.end(), WorkerEnd::kStopped);
    EXPECT_TRUE(worker.error().isOk()) << worker.error().toString();
}

TEST_F(FfnRunnerTest, WorkerSurfacesTheFirstLoopError) {
    FfnWorker worker(*runner_, connector_, {});
    worker.start();
    connector_.pushStep(stepOf(0, 1));  // no frame queued: receive() reports the peer lost
    ASSERT_TRUE(worker.join(5s));
    EXPECT_EQ(worker.end(), WorkerEnd::kFailed);
    EXPECT_EQ(worker.error().code(), core::StatusCode::kPeerLost);
}

TEST_F(FfnRunnerTest, WorkerEndsWhenEveryPeerLeft) {
    FfnWorker worker(*runner_, connector_, {});
    worker.start();
    transport::StepInfo left;
    left.all_left = true;
    connector_.pushStep(left);
    ASSERT_TRUE(worker.join(5s));
    EXPECT_EQ(worker.end(), WorkerEnd::kAllPeersLeft);
}

}  // namespace
}  // namespace afd::ffn
