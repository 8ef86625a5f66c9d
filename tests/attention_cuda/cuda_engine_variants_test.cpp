// The dense GPU engine on generated checkpoints (model::writeSyntheticCheckpoint, as `afd gen-model` writes them) of
// every config variant in tests/data/configs (head_dim 32, GQA 8:1 at head_dim 8 (heads stored padded to 16), attention
// bias, mlp_only_layers, decoder_sparse_step 2, tied embeddings, norm_topk_prob false, MLP widths 16 and 44 (packed
// padded to 32 and 64)): graph replay gives the ids of eager steps, and the prompt logits and first tokens are the CPU
// reference's (at the GPU's precision). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "attention_cuda/engine_test_util.h"
#include "common/subprocess_util.h"
#include "model/synthetic.h"

namespace afd::attention::test {
namespace {

std::vector<std::string> variantNames() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(std::string(AFD_TEST_DATA) + "/configs")) {
        if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

// Generated from `config` (`name` in the messages): graph replay gives the eager steps' ids, and eager prompt logits
// and first tokens are the CPU reference's.
void expectGpuFollowsTheReference(const std::string& name, const model::ModelConfig& config) {
    testing::TempDir dir;
    ASSERT_TRUE(model::writeSyntheticCheckpoint(dir.path(), config, {.seed = 3}).isOk());
    const HostModel host = loadHostModel(dir.path());
    const model::ModelWeights device = uploadToGpu(host);

    std::mt19937 rng(23);
    std::uniform_int_distribution<int> len(1, 12);  // short: each routed token is a chance of a near-tie
    std::uniform_int_distribution<int> token(0, static_cast<int>(host.config.vocab_size) - 1);
    std::vector<std::vector<int32_t>> prompts(16);
    for (auto& p : prompts) {
        p.resize(static_cast<size_t>(len(rng)));
        for (auto& t : p) t = token(rng);
    }
    const auto requests = greedyRequests(prompts, 8);
    EngineOptions options;
    options.scheduler.max_model_len = 256;
    // The reference at the GPU engine's precision: against the FP32 one, a bf16 rounding can swap two experts whose
    // router scores are close, and a random model's output then differs for good (CudaEnginePrecisionTest measures
    // both).
    const RunOutput cpu = runOnCpu(host.config, host.weights, requests, options, false, CpuPrecision::kBf16Activations);
    const RunOutput graphs = runOnGpu(host.config, device, requests, options);
    EXPECT_GT(graphs.graph_replays, 0u);
    options.enforce_eager = true;
    const RunOutput eager = runOnGpu(host.config, device, requests, options);
    // Prompts whose routing has a near-tie cannot tell the engines' precision apart (engine_test_util.h).
    const std::vector<float> gaps =
        referenceRouterGaps(host.config, host.weights, requests, options, CpuPrecision::kBf16Activations);
    // Graph replay and eager steps run the same kernels on the same rows: the same ids. Against the reference, the
    // prompts' logits (a greedy path's later tokens may still part at a near-tie of the logits:
    // CudaEnginePrecisionTest follows the paths step by step).
    int decidable = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (gaps[i] < kDecidableRouterGap) continue;
        ++decidable;
        EXPECT_EQ(graphs.ids[i], eager.ids[i]) << name << " prompt " << i;
        const std::vector<double> want(cpu.prompt_logits[i].begin(), cpu.prompt_logits[i].end());
        EXPECT_LT(relativeL2(eager.prompt_logits[i], want), 2e-2) << name << " prompt " << i;
        // The first token where the reference's top two logits are further apart than the engines' logit errors
        // (about 0.04 on these models) can explain.
        std::vector<float> sorted = cpu.prompt_logits[i];
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] > 0.1f) {
            EXPECT_EQ(eager.ids[i][0], cpu.ids[i][0]) << name << " prompt " << i << ": the first token";
        }
    }
    EXPECT_GE(decidable, 1) << name << ": no prompt without a routing near-tie";
}

class CudaEngineVariantTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineVariantTest, GpuEngineFollowsTheReferenceWithGraphsAsEager) {
    AFD_SKIP_WITHOUT_GPU();
    auto config = model::ModelConfig::fromFile(std::string(AFD_TEST_DATA) + "/configs/" + GetParam() + ".json");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    expectGpuFollowsTheReference(GetParam(), *config);
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaEngineVariantTest, ::testing::ValuesIn(variantNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The shapes scripts/hf_crosscheck.py found the GPU engine refusing, on the tiny shape: 8 heads / 8 kv heads of
// head_dim 8 (stored padded to 16; mha_headdim8), and that with experts of width 16 (packed padded to 32, as
// experts64_top8's; 8 experts top-2 here, where fewer prompts have a routing near-tie), a dense layer of width 44
// (padded to 64) and attention bias (padded with the heads).
TEST(CudaEnginePaddedShapesTest, GpuEngineFollowsTheReferenceOnHfCrosscheckShapes) {
    AFD_SKIP_WITHOUT_GPU();
    model::ModelConfig mha = model::ModelConfig::preset("tiny").value();
    mha.num_attention_heads = 8;
    mha.num_key_value_heads = 8;
    mha.head_dim = 8;
    expectGpuFollowsTheReference("mha_headdim8", mha);
    model::ModelConfig all = mha;
    all.moe_intermediate_size = 16;
    all.intermediate_size = 44;
    all.mlp_only_layers = {2};
    all.attention_bias = true;
    expectGpuFollowsTheReference("mha_headdim8_widths16_44_bias", all);
}

}  // namespace
}  // namespace afd::attention::test
