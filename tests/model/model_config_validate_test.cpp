// ModelConfig::validate rules, the variants' MoE layers, presets and the config.json round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/model_config.h"
#include "model/model_config_test_util.h"

namespace afd::model {
namespace {

using namespace afd::model::testing;
using core::StatusCode;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ModelConfigValidate, HeadsNotDivisibleByKvHeads) {
    json config = baseConfig();
    config["num_key_value_heads"] = 3;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument,
                        "num_attention_heads (4) must be divisible by num_key_value_heads (3)"));
}

TEST(ModelConfigValidate, TopKAboveNumExperts) {
    json config = baseConfig();
    config["num_experts_per_tok"] = 9;
    EXPECT_TRUE(
        refused(config, StatusCode::kInvalidArgument, "num_experts_per_tok (9) must be at most num_experts (8)"));
}

TEST(ModelConfigValidate, DecoderSparseStepBelowOne) {
    json config = baseConfig();
    config["decoder_sparse_step"] = 0;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "decoder_sparse_step must be in [1, 2147483647], got 0"));
}

TEST(ModelConfigValidate, MlpOnlyLayerOutOfRange) {
    for (const int64_t bad : {4, -1}) {
        json config = baseConfig();
        config["mlp_only_layers"] = json::array({0, bad});
        EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument,
                            fmt::format("mlp_only_layers entry {} is outside [0, num_hidden_layers = 4)", bad)));
    }
}

TEST(ModelConfigValidate, MlpOnlyLayerDuplicated) {
    json config = baseConfig();
    config["mlp_only_layers"] = json::array({2, 1, 2});
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "mlp_only_layers lists layer 2 twice"));
}

TEST(ModelConfigValidate, OddHeadDim) {
    json config = baseConfig();
    config["head_dim"] = 15;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "head_dim must be even for RoPE, got 15"));
}

TEST(ModelConfigValidate, NonPositiveRmsNormEps) {
    json config = baseConfig();
    config["rms_norm_eps"] = 0.0;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "rms_norm_eps must be a positive finite number"));
}

TEST(ModelConfigValidate, NonPositiveRopeTheta) {
    json config = baseConfig();
    config["rope_theta"] = -1.0;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "rope_theta must be a positive finite number"));
}

TEST(ModelConfigValidate, EosTokenOutsideVocabulary) {
    json config = baseConfig();
    config["eos_token_id"] = json::array({1, 512});
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "eos_token_id 512 is outside [0, vocab_size = 512)"));
}

TEST(ModelConfigValidate, BosTokenOutsideVocabulary) {
    json config = baseConfig();
    config["bos_token_id"] = -2;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "bos_token_id -2 is outside [0, vocab_size = 512)"));
}

TEST(ModelConfigValidate, ParameterCountOverflow) {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.hidden_size = 2147483646;
    c.moe_intermediate_size = 2147483646;
    c.num_experts = 2147483646;
    EXPECT_TRUE(failsWith(c.validate(), StatusCode::kInvalidArgument, {"parameter count", "overflows"}));
}

TEST(ModelConfigValidate, DirectlyBuiltStructWithOtherDtype) {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.dtype = core::DType::kF16;
    EXPECT_TRUE(failsWith(c.validate(), StatusCode::kUnsupported, {"dtype F16"}));
}

TEST(ModelConfigValidate, DirectlyBuiltStructWithOtherArchitecture) {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.architecture = "MixtralForCausalLM";
    EXPECT_TRUE(failsWith(c.validate(), StatusCode::kUnsupported, {"architecture \"MixtralForCausalLM\""}));
}

// ---- variants (tests/data/configs/, the tiny shape with one change each) and their MoE layers ----

TEST(ModelConfigVariant, AllMoeByDefault) {
    const ModelConfig c = parseOk(baseConfig());
    EXPECT_THAT(moeLayers(c), ElementsAre(0, 1, 2, 3));
    EXPECT_EQ(c.numMoeLayers(), 4);
}

TEST(ModelConfigVariant, TiedEmbeddings) {
    const ModelConfig c = loadOk("configs/tied_embeddings.json");
    EXPECT_TRUE(c.tie_word_embeddings);
    // The LM head shares the [512, 64] embedding.
    EXPECT_EQ(c.numParameters(), parseOk(baseConfig()).numParameters() - 512 * 64);
}

TEST(ModelConfigVariant, NormTopkProbFalse) {
    const ModelConfig c = loadOk("configs/norm_topk_false.json");
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.numMoeLayers(), 4);
}

TEST(ModelConfigVariant, MlpOnlyLayers) {
    const ModelConfig c = loadOk("configs/mlp_only_layers.json");
    EXPECT_THAT(c.mlp_only_layers, ElementsAre(1, 3));
    EXPECT_THAT(moeLayers(c), ElementsAre(0, 2));
    EXPECT_EQ(c.numMoeLayers(), 2);
}

TEST(ModelConfigVariant, DecoderSparseStep2) {
    const ModelConfig c = loadOk("configs/sparse_step_2.json");
    EXPECT_EQ(c.decoder_sparse_step, 2);
    EXPECT_THAT(moeLayers(c), ElementsAre(1, 3));  // (layer + 1) % 2 == 0
}

TEST(ModelConfigVariant, DecoderSparseStepAndMlpOnlyLayersTogether) {
    const ModelConfig c = loadOk("configs/sparse_step_2_mlp_only.json");
    EXPECT_EQ(c.num_hidden_layers, 6);
    EXPECT_THAT(moeLayers(c), ElementsAre(1, 5));  // 1, 3, 5 by the step; 3 is listed dense
}

TEST(ModelConfigVariant, AttentionBias) {
    const ModelConfig c = loadOk("configs/attention_bias.json");
    EXPECT_TRUE(c.attention_bias);
    // Per layer: q bias 64, k and v biases 32 each, o bias 64.
    EXPECT_EQ(c.numParameters(), parseOk(baseConfig()).numParameters() + 4 * (64 + 32 + 32 + 64));
}

TEST(ModelConfigVariant, HeadDimIndependentOfHidden) {
    const ModelConfig c = loadOk("configs/head_dim_32.json");
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.qSize(), 128);  // not hidden_size
    EXPECT_EQ(c.kvSize(), 64);
}

TEST(ModelConfigVariant, Gqa8To1) {
    const ModelConfig c = loadOk("configs/gqa_8to1.json");
    EXPECT_EQ(c.num_attention_heads, 8);
    EXPECT_EQ(c.num_key_value_heads, 1);
    EXPECT_EQ(c.qSize(), 64);
    EXPECT_EQ(c.kvSize(), 8);
}

TEST(ModelConfigVariant, NumMoeLayersCountsWhatIsMoeLayerSays) {
    ModelConfig c = parseOk(baseConfig());
    for (const int64_t layers : {1, 2, 5, 9, 12}) {
        for (const int64_t step : {1, 2, 3, 4, 13}) {
            for (const std::vector<int64_t>& dense : std::vector<std::vector<int64_t>>{{}, {0}, {1, 3}, {2, 5, 8}}) {
                c.num_hidden_layers = layers;
                c.decoder_sparse_step = step;
                c.mlp_only_layers.clear();
                for (const int64_t layer : dense) {
                    if (layer < layers) c.mlp_only_layers.push_back(layer);
                }
                EXPECT_EQ(c.numMoeLayers(), static_cast<int64_t>(moeLayers(c).size()))
                    << layers << " layers, step " << step << ", " << c.mlp_only_layers.size() << " dense";
            }
        }
    }
}

TEST(ModelConfigVariant, NoExpertsMeansNoMoeLayers) {
    ModelConfig c = parseOk(baseConfig());
    c.num_experts = 0;  // transformers' rule; validate() refuses such a config for this engine
    EXPECT_THAT(moeLayers(c), IsEmpty());
    EXPECT_FALSE(c.validate().isOk());
}

TEST(ModelConfigVariant, LayerOutsideTheModelIsABug) {
    const ModelConfig c = parseOk(baseConfig());
    EXPECT_THROW((void)c.isMoeLayer(4), core::Error);
    EXPECT_THROW((void)c.isMoeLayer(-1), core::Error);
}

// ---- presets ----

TEST(ModelConfigPreset, Qwen3_30bA3bEqualsThePublishedConfig) {
    const ModelConfig preset = ModelConfig::preset("qwen3-30b-a3b").value();
    const ModelConfig file = loadOk("qwen3-30b-a3b/config.json");
    EXPECT_EQ(preset.architecture, file.architecture);
    EXPECT_EQ(preset.model_type, file.model_type);
    EXPECT_EQ(preset.vocab_size, file.vocab_size);
    EXPECT_EQ(preset.hidden_size, file.hidden_size);
    EXPECT_EQ(preset.intermediate_size, file.intermediate_size);
    EXPECT_EQ(preset.moe_intermediate_size, file.moe_intermediate_size);
    EXPECT_EQ(preset.num_hidden_layers, file.num_hidden_layers);
    EXPECT_EQ(preset.num_attention_heads, file.num_attention_heads);
    EXPECT_EQ(preset.num_key_value_heads, file.num_key_value_heads);
    EXPECT_EQ(preset.head_dim, file.head_dim);
    EXPECT_EQ(preset.num_experts, file.num_experts);
    EXPECT_EQ(preset.num_experts_per_tok, file.num_experts_per_tok);
    EXPECT_EQ(preset.decoder_sparse_step, file.decoder_sparse_step);
    EXPECT_EQ(preset.mlp_only_layers, file.mlp_only_layers);
    EXPECT_EQ(preset.norm_topk_prob, file.norm_topk_prob);
    EXPECT_EQ(preset.tie_word_embeddings, file.tie_word_embeddings);
    EXPECT_EQ(preset.attention_bias, file.attention_bias);
    EXPECT_EQ(preset.rms_norm_eps, file.rms_norm_eps);
    EXPECT_EQ(preset.rope_theta, file.rope_theta);
    EXPECT_EQ(preset.max_position_embeddings, file.max_position_embeddings);
    EXPECT_EQ(preset.dtype, file.dtype);
    EXPECT_EQ(preset.eos_token_ids, file.eos_token_ids);
    EXPECT_EQ(preset.bos_token_id, file.bos_token_id);
    EXPECT_EQ(preset, file);  // also catches a field added to the struct but not to this list
    // 2 x 151936 x 2048 (embedding, LM head) + 2048 (final norm) + 48 layers x 623,120,640
    // (norms 4096, q/o 2 x 8,388,608, k/v 2 x 1,048,576, q/k norm 256, gate 262,144, experts 603,979,776).
    EXPECT_EQ(preset.numParameters(), 30'532'122'624);
}

TEST(ModelConfigPreset, TinyExercisesGqaAndMoe) {
    const ModelConfig c = ModelConfig::preset("tiny").value();
    EXPECT_TRUE(c.validate().isOk());
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_hidden_layers, 4);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.moe_intermediate_size, 32);
    EXPECT_EQ(c.intermediate_size, 96);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.numMoeLayers(), 4);
    // 2 x 512 x 64 + 64 + 4 layers x (128 norms + 2 x 4096 q/o + 2 x 2048 k/v + 32 q/k norm + 512 gate
    // + 8 x 3 x 64 x 32 experts) = 65,600 + 4 x 62,112.
    EXPECT_EQ(c.numParameters(), 314'048);
}

TEST(ModelConfigPreset, SmallIsABenchmarkSize) {
    const ModelConfig c = ModelConfig::preset("small").value();
    EXPECT_TRUE(c.validate().isOk());
    EXPECT_EQ(c.vocab_size, 8192);
    EXPECT_EQ(c.hidden_size, 512);
    EXPECT_EQ(c.num_hidden_layers, 8);
    EXPECT_EQ(c.num_attention_heads / c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.num_experts, 32);
    EXPECT_EQ(c.num_experts_per_tok, 4);
    EXPECT_EQ(c.numMoeLayers(), 8);
    EXPECT_GE(c.numParameters(), 50'000'000);
    EXPECT_LE(c.numParameters(), 100'000'000);
}

TEST(ModelConfigPreset, NamesAndUnknownName) {
    EXPECT_THAT(ModelConfig::presetNames(), ElementsAre("tiny", "tiny-chat", "small", "qwen3-30b-a3b"));
    for (const std::string& name : ModelConfig::presetNames()) EXPECT_TRUE(ModelConfig::preset(name).isOk()) << name;
    EXPECT_TRUE(failsWith(ModelConfig::preset("huge").status(), StatusCode::kNotFound,
                          {"\"huge\"", "tiny, tiny-chat, small, qwen3-30b-a3b"}));
}

// ---- toJson ----

TEST(ModelConfigToJson, RoundTripsEveryPreset) {
    for (const std::string& name : ModelConfig::presetNames()) {
        const ModelConfig c = ModelConfig::preset(name).value();
        core::Result<ModelConfig> back = ModelConfig::fromJson(c.toJson(), name);
        ASSERT_TRUE(back.isOk()) << name << ": " << back.status().toString();
        EXPECT_EQ(back.value(), c) << name;
    }
}

TEST(ModelConfigToJson, RoundTripsEveryVariant) {
    for (const auto& entry : std::filesystem::directory_iterator(dataPath("configs"))) {
        const ModelConfig c = loadOk("configs/" + entry.path().filename().string());
        core::Result<ModelConfig> back = ModelConfig::fromJson(c.toJson(), entry.path().string());
        ASSERT_TRUE(back.isOk()) << back.status().toString();
        EXPECT_EQ(back.value(), c) << entry.path();
    }
}

TEST(ModelConfigToJson, WritesTheHubFormTransformersLoads) {
    ModelConfig c = ModelConfig::preset("tiny").value();
    c.mlp_only_layers = {1};
    c.eos_token_ids = {5, 6};
    const std::string text = c.toJson();
    EXPECT_THAT(text, HasSubstr("\n  \"vocab_size\": 512"));  // pretty-printed, 2-space indent
    const json j = json::parse(text);
    EXPECT_EQ(j.at("architectures"), json::array({"Qwen3MoeForCausalLM"}));
    EXPECT_EQ(j.at("model_type"), "qwen3_moe");
    EXPECT_EQ(j.at("torch_dtype"), "bfloat16");
    EXPECT_EQ(j.at("hidden_act"), "silu");
    EXPECT_EQ(j.at("use_sliding_window"), false);
    EXPECT_TRUE(j.at("sliding_window").is_null());
    EXPECT_TRUE(j.at("rope_scaling").is_null());
    EXPECT_EQ(j.at("rope_theta"), 1e6);
    EXPECT_EQ(j.at("rms_norm_eps"), 1e-6);
    EXPECT_EQ(j.at("num_experts"), 8);
    EXPECT_EQ(j.at("num_experts_per_tok"), 2);
    EXPECT_EQ(j.at("moe_intermediate_size"), 32);
    EXPECT_EQ(j.at("intermediate_size"), 96);
    EXPECT_EQ(j.at("num_hidden_layers"), 4);
    EXPECT_EQ(j.at("num_attention_heads"), 4);
    EXPECT_EQ(j.at("num_key_value_heads"), 2);
    EXPECT_EQ(j.at("head_dim"), 16);
    EXPECT_EQ(j.at("hidden_size"), 64);
    EXPECT_EQ(j.at("decoder_sparse_step"), 1);
    EXPECT_EQ(j.at("mlp_only_layers"), json::array({1}));
    EXPECT_EQ(j.at("norm_topk_prob"), true);
    EXPECT_EQ(j.at("tie_word_embeddings"), false);
    EXPECT_EQ(j.at("attention_bias"), false);
    EXPECT_EQ(j.at("max_position_embeddings"), 4096);
    EXPECT_EQ(j.at("eos_token_id"), json::array({5, 6}));
    EXPECT_TRUE(j.at("bos_token_id").is_null());
    EXPECT_FALSE(j.contains("num_local_experts"));
    EXPECT_FALSE(j.contains("rope_parameters"));
}

TEST(ModelConfigToJson, SingleEosIsAnIntAndNoneIsNull) {
    ModelConfig c = ModelConfig::preset("qwen3-30b-a3b").value();
    json j = json::parse(c.toJson());
    EXPECT_EQ(j.at("eos_token_id"), 151645);
    EXPECT_EQ(j.at("bos_token_id"), 151643);
    c.eos_token_ids.clear();
    j = json::parse(c.toJson());
    EXPECT_TRUE(j.at("eos_token_id").is_null());
}

// ---- fromFile ----

struct ModelConfigFile : ::testing::Test {
    void SetUp() override {
        dir_ = std::filesystem::path(::testing::TempDir()) /
               ("model_config_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::filesystem::path dir_;
};

TEST_F(ModelConfigFile, MissingFileNamesThePath) {
    const std::string path = (dir_ / "absent.json").string();
    EXPECT_TRUE(failsWith(ModelConfig::fromFile(path).status(), StatusCode::kIoError, {path}));
}

TEST_F(ModelConfigFile, ErrorsInsideTheFileNameThePath) {
    const std::string path = (dir_ / "config.json").string();
    json config = baseConfig();
    config["hidden_act"] = "relu";
    std::ofstream(path) << config.dump();
    EXPECT_TRUE(
        failsWith(ModelConfig::fromFile(path).status(), StatusCode::kUnsupported, {path + ": hidden_act \"relu\""}));
}

TEST_F(ModelConfigFile, OversizedFileIsRefusedBeforeParsing) {
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path) << "{}";
    std::filesystem::resize_file(path, (uint64_t{16} << 20) + 1);  // sparse: no 16 MiB written
    EXPECT_TRUE(
        failsWith(ModelConfig::fromFile(path).status(), StatusCode::kInvalidArgument, {path, "16777217 bytes"}));
}

TEST_F(ModelConfigFile, EmptyFileIsNotJson) {
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path).flush();
    EXPECT_TRUE(failsWith(ModelConfig::fromFile(path).status(), StatusCode::kCorrupt, {path, "not valid JSON"}));
}

TEST(ModelConfigFixture, FuzzSeedCorpusIsAccepted) {
    // The seeds start the fuzzer from valid configs; a seed the parser rejects would only explore error paths.
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/model_config";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const core::Result<ModelConfig> result = ModelConfig::fromFile(entry.path().string());
        EXPECT_TRUE(result.isOk()) << result.status().toString();
        ++seeds;
    }
    EXPECT_GE(seeds, 3u);
}

}  // namespace
}  // namespace afd::model
