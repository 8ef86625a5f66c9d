// The GPU FFN compute against the CPU one on the HF fixture's weights, for m2n expert ranges (partial sums) and
// p2p (router + experts, dense MLP), and on a generated model of MLP widths 16 and 44: fresh random inputs, outputs
// poisoned, relative L2 below 1e-2 (BF16 path; 2e-2 where the GPU routes).
// Compiles with the CUDA backend; skips on machines without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "core/bf16.h"

#include "common/subprocess_util.h"
#include "ffn/compute_factory.h"
#include "ffn/cpu_ffn_compute.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/synthetic.h"
#include "model/weights.h"
#if defined(AFD_HAVE_CUDA_FFN)
#include <cuda_runtime.h>

#include "ffn/cuda/cuda_ffn_compute.h"
#include "kernels/cuda/device_info.h"
#endif

namespace afd::ffn {
namespace {

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

double relL2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

class CudaFfnComputeTest : public ::testing::Test {
protected:
    void SetUp() override {
#if defined(AFD_HAVE_CUDA_FFN)
        if (kernels::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
#else
        GTEST_SKIP() << "built without the CUDA backend";
#endif
        config_ = model::ModelConfig::fromFile(kTiny + "/config.json").value();
        checkpoint_.emplace(model::Checkpoint::open(kTiny).value());
    }

    std::pair<std::unique_ptr<FfnCompute>, std::unique_ptr<FfnCompute>> make(const model::WeightSelection& sel) {
        auto cpu = std::make_unique<CpuFfnCompute>(config_, model::loadWeights(*checkpoint_, config_, sel).value());
        auto gpu = createFfnCompute("cuda", 0, config_, model::loadWeights(*checkpoint_, config_, sel).value(), 512);
        EXPECT_TRUE(gpu.isOk()) << gpu.status().toString();
        return {std::move(cpu), std::move(gpu).value()};
    }

    model::ModelConfig config_;
    std::optional<model::Checkpoint> checkpoint_;
    std::mt19937 rng_{11};
};

TEST_F(CudaFfnComputeTest, M2nPartialSumsMatchCpu) {
    const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok;
    // Experts [2, 6) of 8: ids local to that range, -1 for entries served elsewhere.
    auto [cpu, gpu] = make(model::WeightSelection::ffnRole(true, config_, 2, 6));
    for (int64_t T : {1, 5, 33, 300, 300, 17}) {  // 300 twice: the second call replays the captured graph
        std::normal_distribution<float> normal;
        std::uniform_int_distribution<int> id(-1, 3);
        std::vector<float> x(T * H), w(T * K), out_cpu(T * H, NAN), out_gpu(T * H, NAN);
        std::vector<int32_t> ids(T * K);
        for (auto& v : x) v = normal(rng_);
        for (auto& v : ids) v = id(rng_);
        for (auto& v : w) v = std::abs(normal(rng_));
        ASSERT_TRUE(cpu->moePartial(0, T, x.data(), ids.data(), w.data(), out_cpu.data()).isOk());
        ASSERT_TRUE(gpu->moePartial(0, T, x.data(), ids.data(), w.data(), out_gpu.data()).isOk());
        for (float v : out_gpu) ASSERT_FALSE(std::isnan(v));
        EXPECT_LT(relL2(out_gpu, out_cpu), 1e-2) << "T=" << T;
    }
    gpu->release();
}

TEST_F(CudaFfnComputeTest, P2pWholeBlockMatchesCpu) {
    const int64_t H = config_.hidden_size;
    auto [cpu, gpu] = make(model::WeightSelection::ffnRole(false, config_, 0, config_.num_experts));
    for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
        for (int64_t T : {1, 9, 64}) {
            std::normal_distribution<float> normal;
            std::vector<float> x(T * H), out_cpu(T * H, NAN), out_gpu(T * H, NAN);
            for (auto& v : x) v = normal(rng_);
            ASSERT_TRUE(cpu->mlpBlock(layer, T, x.data(), out_cpu.data()).isOk());
            ASSERT_TRUE(gpu->mlpBlock(layer, T, x.data(), out_gpu.data()).isOk());
            EXPECT_LT(relL2(out_gpu, out_cpu), 1e-2) << "layer " << layer << " T=" << T;
        }
    }
}

// p2p on a shape the GPU router takes (32 experts, top-4, a dense layer too): the router runs on the GPU and is
// captured in the layer's graph, with the padding rows routed by it.
TEST_F(CudaFfnComputeTest, P2pWithTheGpuRouterMatchesCpu) {
    auto config = model::ModelConfig::preset("tiny").value();
    config.num_experts = 32;
    config.num_experts_per_tok = 4;
    config.mlp_only_layers = {1};
    testing::TempDir dir;
    ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), config, {}).isOk());
    auto checkpoint = model::Checkpoint::open(dir.path()).value();
    const auto sel = model::WeightSelection::ffnRole(false, config, 0, config.num_experts);
    CpuFfnCompute cpu(config, model::loadWeights(checkpoint, config, sel).value());
    auto gpu = createFfnCompute("cuda", 0, config, model::loadWeights(checkpoint, config, sel).value(), 512);
    ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
    const int64_t H = config.hidden_size;
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        for (int64_t T : {1, 7, 100, 100}) {
            std::normal_distribution<float> normal;
            std::vector<float> x(T * H), out_cpu(T * H, NAN), out_gpu(T * H, NAN);
            // Inputs already on the BF16 grid: the GPU routes from BF16 activations, and with 32 experts an FP32
            // reference routing from unrounded inputs picks another expert on near-ties (a whole expert's output
            // of difference for that token), which is not the kernels' error.
            for (auto& v : x) v = core::roundToBf16(normal(rng_));
            ASSERT_TRUE(cpu.mlpBlock(layer, T, x.data(), out_cpu.data()).isOk());
            ASSERT_TRUE((*gpu)->mlpBlock(layer, T, x.data(), out_gpu.data()).isOk());
            EXPECT_LT(relL2(out_gpu, out_cpu), 2e-2) << "layer " << layer << " T=" << T;
        }
    }
}

// MLP widths that are not a multiple of 32 (experts of width 16 as hf_crosscheck's experts64_top8, a dense layer of
// 44): the GPU rank packs them at the packed width with zeros and gives the CPU rank's sums, m2n and p2p.
TEST_F(CudaFfnComputeTest, NarrowMlpWidthsMatchCpu) {
    auto config = model::ModelConfig::preset("tiny").value();
    config.moe_intermediate_size = 16;
    config.intermediate_size = 44;
    config.mlp_only_layers = {1};
    testing::TempDir dir;
    ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), config, {.seed = 8}).isOk());
    auto checkpoint = model::Checkpoint::open(dir.path()).value();
    const int64_t H = config.hidden_size, K = config.num_experts_per_tok;
    for (const bool m2n : {true, false}) {
        SCOPED_TRACE(m2n ? "m2n experts [2, 6)" : "p2p");
        const auto sel = m2n ? model::WeightSelection::ffnRole(true, config, 2, 6)
                             : model::WeightSelection::ffnRole(false, config, 0, config.num_experts);
        CpuFfnCompute cpu(config, model::loadWeights(checkpoint, config, sel).value());
        auto gpu = createFfnCompute("cuda", 0, config, model::loadWeights(checkpoint, config, sel).value(), 512);
        ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
        for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
            if (m2n && !config.isMoeLayer(layer)) continue;  // an m2n rank holds experts only
            for (int64_t T : {1, 19, 19}) {                  // twice: the second call replays the captured graph
                std::normal_distribution<float> normal;
                std::uniform_int_distribution<int> id(-1, 3);
                std::vector<float> x(T * H), w(T * K), out_cpu(T * H, NAN), out_gpu(T * H, NAN);
                std::vector<int32_t> ids(T * K);
                // On the BF16 grid: p2p routes on the GPU from BF16 activations (P2pWithTheGpuRouterMatchesCpu).
                for (auto& v : x) v = core::roundToBf16(normal(rng_));
                for (auto& v : ids) v = id(rng_);
                for (auto& v : w) v = std::abs(normal(rng_));
                if (m2n) {
                    ASSERT_TRUE(cpu.moePartial(layer, T, x.data(), ids.data(), w.data(), out_cpu.data()).isOk());
                    ASSERT_TRUE((*gpu)->moePartial(layer, T, x.data(), ids.data(), w.data(), out_gpu.data()).isOk());
                } else {
                    ASSERT_TRUE(cpu.mlpBlock(layer, T, x.data(), out_cpu.data()).isOk());
                    ASSERT_TRUE((*gpu)->mlpBlock(layer, T, x.data(), out_gpu.data()).isOk());
                }
                for (float v : out_gpu) ASSERT_FALSE(std::isnan(v));
                EXPECT_LT(relL2(out_gpu, out_cpu), 2e-2) << "layer " << layer << " T=" << T;
            }
        }
        (*gpu)->release();
    }
}

#if defined(AFD_HAVE_CUDA_FFN)
// No device needed: the bytes a GPU FFN rank needs follow the experts it holds and the rows it stages.
TEST(CudaFfnDeviceBytesTest, FollowTheExpertsAndRowsARankHolds) {
    const model::ModelConfig c = model::ModelConfig::preset("qwen3-30b-a3b").value();
    const uint64_t per_expert = uint64_t{3} * 2048 * 768 * 2;  // 9,437,184 B per expert and layer
    const uint64_t half = cudaFfnDeviceBytes(c, model::WeightSelection::ffnRole(true, c, 0, 64), 512);
    const uint64_t all = cudaFfnDeviceBytes(c, model::WeightSelection::ffnRole(true, c, 0, 128), 512);
    // 48 MoE layers of 64 experts more, and 64 more in the one layer staged at a time; the kernels' workspace grows by
    // a few words per expert.
    const uint64_t more = 48 * 64 * per_expert + 64 * per_expert;
    EXPECT_GE(all - half, more);
    EXPECT_LT(all - half, more + 65536);
    EXPECT_GT(half, 48 * 64 * per_expert);
    EXPECT_LT(half, 49 * 64 * per_expert + (uint64_t{1} << 30));  // activations and workspaces for 512 rows
    EXPECT_GT(cudaFfnDeviceBytes(c, model::WeightSelection::ffnRole(true, c, 0, 64), 4096), half);
    // p2p: every expert and the router of each MoE layer (128 x 2048 bf16).
    const uint64_t p2p = cudaFfnDeviceBytes(c, model::WeightSelection::ffnRole(false, c, 0, 0), 512);
    EXPECT_GE(p2p - all, uint64_t{48} * 128 * 2048 * 2);
}

// The rank's allocations stay within the estimate its load checks first, up to 32 MiB (allocation granularity and the
// captured graphs: 2 layers x the token buckets up to 512), well inside the 256 MiB of headroom the check adds. The
// model's 32 served experts (hidden 512, expert width 256) are 50 MB, so the weights dominate both sides.
TEST_F(CudaFfnComputeTest, AllocatesNoMoreThanTheEstimateItsLoadChecks) {
    auto config = model::ModelConfig::preset("tiny").value();
    config.hidden_size = 512;
    config.moe_intermediate_size = 256;
    config.num_hidden_layers = 2;
    config.num_experts = 64;
    config.num_experts_per_tok = 8;
    testing::TempDir dir;
    ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), config, {}).isOk());
    auto checkpoint = model::Checkpoint::open(dir.path()).value();
    const auto selection = model::WeightSelection::ffnRole(true, config, 0, 32);
    auto weights = model::loadWeights(checkpoint, config, selection).value();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the context exists before the first reading
    size_t free_before = 0, free_after = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    auto gpu = createFfnCompute("cuda", 0, config, std::move(weights), 512);
    ASSERT_TRUE(gpu.isOk()) << gpu.status().toString();
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    const uint64_t used = free_before - free_after;
    const uint64_t estimate = cudaFfnDeviceBytes(config, selection, 512);
    EXPECT_GE(used, uint64_t{2} * 32 * 3 * 512 * 256 * 2);  // the packed experts are on the device
    EXPECT_LE(used, estimate + (uint64_t{32} << 20)) << "allocated " << used << " bytes, estimated " << estimate;
    std::printf("GPU FFN rank: allocated %llu bytes, estimated %llu\n", static_cast<unsigned long long>(used),
                static_cast<unsigned long long>(estimate));
}

// No device needed: calls whose largest token bucket passes the kernels' 32-bit offsets are refused before anything
// else, with the most rows a call may carry (114688 at Qwen3-30B-A3B's top-8 x 2048: the bucket below 131072).
TEST(CudaFfnFitTest, RefusesCallsPastTheKernelsOffsetsBeforeAskingTheDevice) {
    const model::ModelConfig c = model::ModelConfig::preset("qwen3-30b-a3b").value();
    const auto half = model::WeightSelection::ffnRole(true, c, 0, 64);
    const core::Status refused = checkCudaFfnFits(c, half, 0, int64_t{1} << 20);
    EXPECT_EQ(refused.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.toString(), ::testing::AllOf(::testing::HasSubstr("afd.max_num_tokens"),
                                                     ::testing::HasSubstr("at most 114688 rows")));
    EXPECT_THAT(checkCudaFfnFits(c, half, 0, 114689).toString(), ::testing::HasSubstr("at most 114688 rows"));
}

// A rank its GPU cannot hold is refused before any weight is read, naming the GPU, the memory and the remedy.
TEST_F(CudaFfnComputeTest, RefusesARankItsGpuCannotHoldBeforeLoading) {
    model::ModelConfig deep = model::ModelConfig::preset("qwen3-30b-a3b").value();
    deep.num_hidden_layers = 200;  // 200 MoE layers of 128 experts: 242 GB
    const core::Status refused =
        checkFfnComputeFits("cuda", 0, deep, model::WeightSelection::ffnRole(true, deep, 0, 128), 512);
    EXPECT_FALSE(refused.isOk());
    EXPECT_THAT(refused.toString(), ::testing::AllOf(::testing::HasSubstr("cuda:0"), ::testing::HasSubstr("GiB free"),
                                                     ::testing::HasSubstr("afd.num_ffn_ranks")));
    const model::ModelConfig c = model::ModelConfig::preset("qwen3-30b-a3b").value();
    const auto all = model::WeightSelection::ffnRole(true, c, 0, c.num_experts);
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    if (free_bytes > cudaFfnDeviceBytes(c, all, 512) + kCudaFfnHeadroomBytes) {
        EXPECT_TRUE(checkFfnComputeFits("cuda", 0, c, all, 512).isOk());  // 58 GB of experts: an H200 holds them
    }
    EXPECT_TRUE(checkFfnComputeFits("cpu", -1, deep, all, 512).isOk());  // host memory is not checked
}
#endif

}  // namespace
}  // namespace afd::ffn
