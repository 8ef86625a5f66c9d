// The GPU FFN compute's device entry points (computeDevice on a lane, step graphs) against the CPU compute on the HF
// fixture's weights: two peers' m2n frames in device memory gathered into one batch, eagerly (through the layer graph
// of the bucket, padding rows included) and captured in a step graph replayed on fresh inputs; the outputs poisoned
// first, relative L2 below 1e-2; the frames' local ids counted per expert; an out-of-range id fails the step.
// Compiles with the CUDA backend; skips on machines without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/bf16.h"

#include "ffn/cpu_ffn_compute.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"
#if defined(AFD_HAVE_CUDA_FFN)
#include <cuda_runtime.h>

#include "ffn/cuda/cuda_ffn_compute.h"
#include "kernels/cuda/device_info.h"
#endif

namespace afd::ffn {
namespace {

#if defined(AFD_HAVE_CUDA_FFN)

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

double relL2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// One peer's frame: host values and their device copy (x as BF16, as the connector's slot holds it).
struct PeerFrame {
    int64_t rows = 0;
    std::vector<float> x;  // on the BF16 grid
    std::vector<int32_t> ids;
    std::vector<float> weights;
    void* d_x = nullptr;
    int32_t* d_ids = nullptr;
    float* d_weights = nullptr;

    PeerFrame(int64_t n, int64_t H, int64_t K) : rows(n), x(n * H), ids(n * K), weights(n * K) {
        EXPECT_EQ(cudaMalloc(&d_x, std::max<int64_t>(1, n * H) * sizeof(uint16_t)), cudaSuccess);
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_ids), std::max<int64_t>(1, n * K) * sizeof(int32_t)),
                  cudaSuccess);
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_weights), std::max<int64_t>(1, n * K) * sizeof(float)),
                  cudaSuccess);
    }
    ~PeerFrame() {
        (void)cudaFree(d_x);
        (void)cudaFree(d_ids);
        (void)cudaFree(d_weights);
    }
    PeerFrame(const PeerFrame&) = delete;
    PeerFrame& operator=(const PeerFrame&) = delete;

    // Fresh values (ids local to a 4-expert range, -1 for entries served elsewhere), uploaded.
    void fill(std::mt19937& rng) {
        std::normal_distribution<float> normal;
        std::uniform_int_distribution<int> id(-1, 3);
        std::vector<uint16_t> bits(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            bits[i] = core::floatToBf16Bits(normal(rng));
            x[i] = core::bf16BitsToFloat(bits[i]);
        }
        for (auto& v : ids) v = id(rng);
        for (auto& v : weights) v = std::abs(normal(rng));
        ASSERT_EQ(cudaMemcpy(d_x, bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_ids, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_weights, weights.data(), weights.size() * sizeof(float), cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    DevicePeerRows view() const { return {d_x, d_ids, d_weights, rows}; }
};

class CudaFfnDeviceLanesTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (kernels::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
        config_ = model::ModelConfig::fromFile(kTiny + "/config.json").value();
        checkpoint_.emplace(model::Checkpoint::open(kTiny).value());
        const auto sel = model::WeightSelection::ffnRole(true, config_, 2, 6);  // experts [2, 6) of 8
        cpu_ = std::make_unique<CpuFfnCompute>(config_, model::loadWeights(*checkpoint_, config_, sel).value());
        auto gpu = createCudaFfnCompute(config_, model::loadWeights(*checkpoint_, config_, sel).value(), 0, 512,
                                        /*num_device_lanes=*/1);
        ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
        gpu_ = std::move(gpu).value();
    }
    void TearDown() override {
        if (gpu_) gpu_->release();
    }

    // The CPU compute over the peers' rows back to back.
    std::vector<float> expected(const std::vector<const PeerFrame*>& peers) {
        std::vector<float> x, w;
        std::vector<int32_t> ids;
        for (const PeerFrame* p : peers) {
            x.insert(x.end(), p->x.begin(), p->x.end());
            ids.insert(ids.end(), p->ids.begin(), p->ids.end());
            w.insert(w.end(), p->weights.begin(), p->weights.end());
        }
        const int64_t T = static_cast<int64_t>(ids.size()) / config_.num_experts_per_tok;
        std::vector<float> out(T * config_.hidden_size, NAN);
        EXPECT_TRUE(cpu_->moePartial(0, T, x.data(), ids.data(), w.data(), out.data()).isOk());
        return out;
    }

    std::vector<float> laneOutput(int64_t T) {
        std::vector<float> out(T * config_.hidden_size);
        EXPECT_EQ(cudaMemcpy(out.data(), gpu_->laneOutput(0), out.size() * sizeof(float), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        return out;
    }

    void poisonOutput() {
        ASSERT_EQ(cudaMemset(const_cast<float*>(gpu_->laneOutput(0)), 0xff, 512 * config_.hidden_size * sizeof(float)),
                  cudaSuccess);
    }

    static void addCounts(const PeerFrame& p, std::vector<uint64_t>& counts) {
        for (int32_t id : p.ids)
            if (id >= 0) ++counts[static_cast<size_t>(id)];
    }

    model::ModelConfig config_;
    std::optional<model::Checkpoint> checkpoint_;
    std::unique_ptr<FfnCompute> cpu_;
    std::unique_ptr<FfnCompute> gpu_;
    std::mt19937 rng_{21};
};

TEST_F(CudaFfnDeviceLanesTest, GatheredPeersMatchCpuEagerAndInAStepGraph) {
    const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
    ASSERT_EQ(gpu_->numDeviceLanes(), 1);
    PeerFrame a(3, H, K), empty(0, H, K), b(6, H, K);
    std::vector<uint64_t> want_counts(4, 0);
    const std::vector<DevicePeerRows> rows = {a.view(), empty.view(), b.view()};

    // Eager: 9 rows run through the layer graph of bucket 16 (7 padding rows).
    a.fill(rng_);
    b.fill(rng_);
    poisonOutput();
    ASSERT_TRUE(gpu_->computeDevice(0, 0, rows).isOk());
    ASSERT_TRUE(gpu_->synchronizeLanes().isOk());
    EXPECT_LT(relL2(laneOutput(9), expected({&a, &b})), 1e-2) << "eager";
    addCounts(a, want_counts);
    addCounts(b, want_counts);

    // A step graph of the same frames: captured once, replayed on fresh values in the same slots.
    ASSERT_TRUE(gpu_->beginStepCapture(0).isOk());
    const core::Status posted = gpu_->computeDevice(0, 0, rows);
    auto graph = gpu_->endStepCapture(0, posted.isOk());
    ASSERT_TRUE(posted.isOk()) << posted.toString();
    ASSERT_TRUE(graph.isOk()) << graph.status().toString();
    for (int replay = 0; replay < 2; ++replay) {
        a.fill(rng_);
        b.fill(rng_);
        poisonOutput();
        ASSERT_TRUE(gpu_->launchStepGraph(*graph, 0).isOk());
        ASSERT_TRUE(gpu_->synchronizeLanes().isOk());
        const auto got = laneOutput(9);
        for (float v : got) ASSERT_FALSE(std::isnan(v)) << "replay " << replay;
        EXPECT_LT(relL2(got, expected({&a, &b})), 1e-2) << "replay " << replay;
        addCounts(a, want_counts);
        addCounts(b, want_counts);
    }
    std::vector<uint64_t> totals(4, 0);
    ASSERT_TRUE(gpu_->routedTokenTotals(totals));
    EXPECT_EQ(totals, want_counts);
}

TEST_F(CudaFfnDeviceLanesTest, AnIdOutsideTheRanksExpertsFailsTheStep) {
    const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
    PeerFrame a(4, H, K);
    a.fill(rng_);
    const int32_t bad = 4;  // the rank serves 4 experts: local ids 0 ... 3
    ASSERT_EQ(cudaMemcpy(a.d_ids + 5, &bad, sizeof(bad), cudaMemcpyHostToDevice), cudaSuccess);
    const std::vector<DevicePeerRows> rows = {a.view()};
    ASSERT_TRUE(gpu_->computeDevice(0, 0, rows).isOk());
    const core::Status status = gpu_->synchronizeLanes();
    EXPECT_EQ(status.code(), core::StatusCode::kCorrupt) << status.toString();
    EXPECT_NE(status.message().find("expert id 4"), std::string::npos) << status.toString();
}

#else

TEST(CudaFfnDeviceLanesTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif

}  // namespace
}  // namespace afd::ffn
