// The GPU FFN compute's p2p routing counts (FfnCompute::routedTokenTotals): the counting kernel against a host tally,
// and a p2p compute's totals against the CPU compute's (CpuFfnCompute) on the same inputs, step after step of
// different row counts, eagerly and through the captured graphs (whose buckets pad the rows), for the GPU router and
// for a shape routed on the host. Compiles with the CUDA backend; skips on machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess_util.h"
#include "core/bf16.h"
#include "ffn/compute_factory.h"
#include "ffn/cpu_ffn_compute.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/synthetic.h"
#include "model/weights.h"
#if defined(AFD_HAVE_CUDA_FFN)
#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"
#include "kernels/expert_count_cuda.h"
#endif

namespace afd::ffn {
namespace {

#if defined(AFD_HAVE_CUDA_FFN)

bool haveGpu() { return kernels::cuda::deviceCount() > 0; }

// Sets an environment variable for one scope (the compute reads AFD_FFN_CUDA_GRAPHS when it is created).
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        ::setenv(name, value, 1);
    }
    ~ScopedEnv() {
        if (old_) {
            ::setenv(name_, old_->c_str(), 1);
        } else {
            ::unsetenv(name_);
        }
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    std::optional<std::string> old_;
};

int64_t numMoeLayers(const model::ModelConfig& config) {
    int64_t n = 0;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) n += config.isMoeLayer(l) ? 1 : 0;
    return n;
}

// Routers whose choice both sides make alike: expert e's gate row is the unit vector of column e, so its logit is
// x[t, e] itself (no sum to round differently), and routerInputs gives each token distinct values there.
void useUnitRouters(const model::ModelConfig& config, model::ModelWeights& weights) {
    const int64_t E = config.num_experts, H = config.hidden_size;
    ASSERT_LE(E, H);
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        if (!config.isMoeLayer(l)) continue;
        core::Tensor gate = core::Tensor::zeros(core::DType::kBf16, {E, H});
        auto* g = gate.data<core::Bf16>();
        for (int64_t e = 0; e < E; ++e) g[e * H + e] = core::Bf16(1.0f);
        weights.mlp[static_cast<size_t>(l)].router = std::move(gate);
    }
}

// x [T, H] on the BF16 grid (the GPU routes from BF16 activations); with `distinct_columns` experts, each row's first
// columns are a shuffle of distinct multiples of 1/8 (exact in BF16, logits 0.125 apart: no near-ties).
std::vector<float> routerInputs(int64_t T, int64_t H, int64_t distinct_columns, std::mt19937& rng) {
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(T * H));
    for (auto& v : x) v = core::roundToBf16(normal(rng));
    std::vector<int> order(static_cast<size_t>(distinct_columns));
    for (int64_t t = 0; t < T; ++t) {
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t c = 0; c < distinct_columns; ++c) {
            x[static_cast<size_t>(t * H + c)] = static_cast<float>(order[static_cast<size_t>(c)] - 16) / 8.0f;
        }
    }
    return x;
}

class CudaRoutedTokensTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
    }

    // A tiny p2p model: `experts` experts, top-4, layer 1 a dense MLP (it counts nothing).
    void makeModel(int64_t experts) {
        config_ = model::ModelConfig::preset("tiny").value();
        config_.num_experts = experts;
        config_.num_experts_per_tok = 4;
        config_.mlp_only_layers = {1};
        ASSERT_TRUE(model::writeSyntheticCheckpoint(dir_.path(), config_, {}).isOk());
        checkpoint_.emplace(model::Checkpoint::open(dir_.path()).value());
    }

    model::ModelWeights p2pWeights(bool unit_routers) {
        auto weights = model::loadWeights(*checkpoint_, config_,
                                          model::WeightSelection::ffnRole(false, config_, 0, config_.num_experts))
                           .value();
        if (unit_routers) useUnitRouters(config_, weights);
        return weights;
    }

    // Steps of `rows` tokens through every layer on both computes (as a p2p FFN rank serves them); after each step the
    // GPU totals equal the CPU's and sum to the rows so far x top_k x MoE layers.
    void expectTotalsMatchOverSteps(FfnCompute& cpu, FfnCompute& gpu, const std::vector<int64_t>& rows,
                                    int64_t distinct_columns) {
        const int64_t H = config_.hidden_size;
        const auto E = static_cast<size_t>(config_.num_experts);
        std::vector<uint64_t> cpu_totals(E), gpu_totals(E, ~uint64_t{0});
        ASSERT_TRUE(gpu.routedTokenTotals(gpu_totals));
        EXPECT_EQ(gpu_totals, std::vector<uint64_t>(E, 0)) << "a new compute has counted nothing";
        uint64_t tokens = 0;
        for (const int64_t T : rows) {
            const std::vector<float> x = routerInputs(T, H, distinct_columns, rng_);
            std::vector<float> out_cpu(x.size()), out_gpu(x.size());
            for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
                ASSERT_TRUE(cpu.mlpBlock(layer, T, x.data(), out_cpu.data()).isOk());
                ASSERT_TRUE(gpu.mlpBlock(layer, T, x.data(), out_gpu.data()).isOk());
            }
            tokens += static_cast<uint64_t>(T);
            ASSERT_TRUE(cpu.routedTokenTotals(cpu_totals));
            std::fill(gpu_totals.begin(), gpu_totals.end(), ~uint64_t{0});
            ASSERT_TRUE(gpu.routedTokenTotals(gpu_totals));
            EXPECT_EQ(gpu_totals, cpu_totals) << "after the step of " << T << " rows";
            const uint64_t expected =
                tokens * static_cast<uint64_t>(config_.num_experts_per_tok * numMoeLayers(config_));
            EXPECT_EQ(std::accumulate(gpu_totals.begin(), gpu_totals.end(), uint64_t{0}), expected)
                << "after the step of " << T << " rows: padding rows or the dense layer counted";
        }
    }

    // 1, 7 (bucket 16), 100 (bucket 112) twice, 33 (bucket 48), 300 (bucket 320), 16 (a whole bucket), 511.
    const std::vector<int64_t> steps_ = {1, 7, 100, 100, 33, 300, 16, 511};
    model::ModelConfig config_;
    testing::TempDir dir_;
    std::optional<model::Checkpoint> checkpoint_;
    std::mt19937 rng_{23};
};

// The kernel alone: entries of the first *num_valid rows only, ids -1 and out of range skipped, totals accumulating
// over launches (a second launch with another valid-row count on the same buffers, as a graph replay does).
TEST_F(CudaRoutedTokensTest, CountKernelTalliesTheValidRowsIdsAndAccumulates) {
    const int64_t rows = 3000, K = 6, E = 300;
    std::uniform_int_distribution<int32_t> id(-2, E + 1);
    std::vector<int32_t> ids(static_cast<size_t>(rows * K));
    for (auto& v : ids) v = id(rng_);
    int32_t *ids_dev = nullptr, *valid_dev = nullptr;
    uint64_t* counts_dev = nullptr;
    ASSERT_EQ(cudaMalloc(&ids_dev, ids.size() * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&valid_dev, sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&counts_dev, E * sizeof(uint64_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ids_dev, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(counts_dev, 0, E * sizeof(uint64_t)), cudaSuccess);
    std::vector<uint64_t> expected(E, 0);
    for (const int32_t valid : {2999, 1, 0, 3000, 5000}) {  // 5000: clamped to the 3000 rows
        ASSERT_EQ(cudaMemcpy(valid_dev, &valid, sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
        kernels::countExpertTokensCuda({rows, K, E, valid_dev, ids_dev, counts_dev}, nullptr);
        for (int64_t i = 0; i < std::min<int64_t>(valid, rows) * K; ++i) {
            const int32_t e = ids[static_cast<size_t>(i)];
            if (e >= 0 && e < E) ++expected[static_cast<size_t>(e)];
        }
        std::vector<uint64_t> snapshot(E, ~uint64_t{0});
        uint64_t* snapshot_dev = nullptr;
        ASSERT_EQ(cudaMalloc(&snapshot_dev, E * sizeof(uint64_t)), cudaSuccess);
        kernels::snapshotCountersCuda(counts_dev, snapshot_dev, E, nullptr);
        ASSERT_EQ(cudaMemcpy(snapshot.data(), snapshot_dev, E * sizeof(uint64_t), cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaFree(snapshot_dev), cudaSuccess);
        EXPECT_EQ(snapshot, expected) << "after counting " << valid << " valid rows";
    }
    ASSERT_EQ(cudaFree(ids_dev), cudaSuccess);
    ASSERT_EQ(cudaFree(valid_dev), cudaSuccess);
    ASSERT_EQ(cudaFree(counts_dev), cudaSuccess);
}

TEST_F(CudaRoutedTokensTest, GpuRouterTotalsMatchCpuThroughPaddedGraphs) {
    makeModel(32);
    CpuFfnCompute cpu(config_, p2pWeights(true));
    auto gpu = createFfnCompute("cuda", 0, config_, p2pWeights(true), 512);
    ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
    expectTotalsMatchOverSteps(cpu, **gpu, steps_, config_.num_experts);
    (*gpu)->release();
}

TEST_F(CudaRoutedTokensTest, GpuRouterTotalsMatchCpuEagerly) {
    makeModel(32);
    const ScopedEnv eager("AFD_FFN_CUDA_GRAPHS", "0");
    CpuFfnCompute cpu(config_, p2pWeights(true));
    auto gpu = createFfnCompute("cuda", 0, config_, p2pWeights(true), 512);
    ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
    expectTotalsMatchOverSteps(cpu, **gpu, steps_, config_.num_experts);
    (*gpu)->release();
}

// 320 experts: more than the GPU router takes, so the compute routes on the host with the CPU's own router and uploads
// the ids (padding rows -1); the device still counts them. Synthetic routers: both sides route alike bit for bit.
TEST_F(CudaRoutedTokensTest, HostRoutedTotalsMatchCpuThroughGraphsAndEagerly) {
    makeModel(320);
    for (const char* graphs : {"1", "0"}) {
        const ScopedEnv env("AFD_FFN_CUDA_GRAPHS", graphs);
        CpuFfnCompute cpu(config_, p2pWeights(false));
        auto gpu = createFfnCompute("cuda", 0, config_, p2pWeights(false), 512);
        ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
        expectTotalsMatchOverSteps(cpu, **gpu, {1, 9, 100, 300}, 0);
        (*gpu)->release();
    }
}

// Read from another thread while the worker computes (as the admin thread renders /metrics): every read succeeds
// and no total ever goes down; after release() the last totals still answer, equal to the CPU's.
TEST_F(CudaRoutedTokensTest, TotalsReadWhileComputingAndAfterRelease) {
    makeModel(32);
    CpuFfnCompute cpu(config_, p2pWeights(true));
    auto created = createFfnCompute("cuda", 0, config_, p2pWeights(true), 512);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    FfnCompute& gpu = **created;
    const auto E = static_cast<size_t>(config_.num_experts);
    std::atomic<bool> done{false};
    std::atomic<int64_t> reads{0}, failures{0};
    std::thread reader([&] {
        std::vector<uint64_t> last(E, 0), now(E);
        while (!done.load()) {
            if (!gpu.routedTokenTotals(now)) {
                ++failures;
                continue;
            }
            for (size_t e = 0; e < E; ++e) {
                if (now[e] < last[e]) ++failures;
            }
            last = now;
            ++reads;
        }
    });
    const int64_t H = config_.hidden_size;
    for (int step = 0; step < 40; ++step) {
        const int64_t T = 1 + (step * 37) % 200;
        const std::vector<float> x = routerInputs(T, H, config_.num_experts, rng_);
        std::vector<float> out(x.size());
        for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
            EXPECT_TRUE(cpu.mlpBlock(layer, T, x.data(), out.data()).isOk());  // not ASSERT: the reader must join
            EXPECT_TRUE(gpu.mlpBlock(layer, T, x.data(), out.data()).isOk());
        }
    }
    done = true;
    reader.join();
    EXPECT_GT(reads.load(), 0);
    EXPECT_EQ(failures.load(), 0) << "failed reads or totals that went down";
    gpu.release();
    std::vector<uint64_t> cpu_totals(E), gpu_totals(E, ~uint64_t{0});
    ASSERT_TRUE(cpu.routedTokenTotals(cpu_totals));
    ASSERT_TRUE(gpu.routedTokenTotals(gpu_totals));
    EXPECT_EQ(gpu_totals, cpu_totals);
}

// m2n: the compute routes nothing (FfnRunner counts the frames' ids), so it keeps no totals.
TEST_F(CudaRoutedTokensTest, M2nComputeKeepsNoTotals) {
    makeModel(32);
    auto gpu = createFfnCompute(
        "cuda", 0, config_,
        model::loadWeights(*checkpoint_, config_, model::WeightSelection::ffnRole(true, config_, 8, 24)).value(), 64);
    ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
    std::vector<uint64_t> totals(static_cast<size_t>(config_.num_experts), 7);
    EXPECT_FALSE((*gpu)->routedTokenTotals(totals));
    EXPECT_EQ(totals, std::vector<uint64_t>(totals.size(), 7)) << "left untouched";
    (*gpu)->release();
}

#else

TEST(CudaRoutedTokensTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif

}  // namespace
}  // namespace afd::ffn
