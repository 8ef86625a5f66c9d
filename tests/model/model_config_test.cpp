#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"

namespace afd::model {
namespace {

using core::StatusCode;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr const char* kSource = "dir/config.json";

std::string dataPath(const std::string& relative) { return std::string(AFD_TEST_DATA) + "/" + relative; }

// The tiny shape in hub form, as a transformers save_pretrained would write it; tests change one field.
json baseConfig() {
    return json::parse(R"({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": true, "tie_word_embeddings": false, "attention_bias": false,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": null, "max_position_embeddings": 4096,
        "use_sliding_window": false, "sliding_window": null, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "bos_token_id": null, "eos_token_id": 1, "initializer_range": 0.02, "use_cache": true
    })");
}

core::Result<ModelConfig> parse(const json& config) { return ModelConfig::fromJson(config.dump(), kSource); }

ModelConfig parseOk(const json& config) {
    core::Result<ModelConfig> result = parse(config);
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    return result.isOk() ? result.value() : ModelConfig{};
}

ModelConfig loadOk(const std::string& relative) {
    core::Result<ModelConfig> result = ModelConfig::fromFile(dataPath(relative));
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    return result.isOk() ? result.value() : ModelConfig{};
}

// Success when `status` has `code` and a message holding every one of `needles`.
::testing::AssertionResult failsWith(const core::Status& status, StatusCode code,
                                     const std::vector<std::string>& needles) {
    if (status.isOk()) return ::testing::AssertionFailure() << "accepted, expected an error";
    if (status.code() != code) {
        return ::testing::AssertionFailure() << "code " << core::statusCodeName(status.code()) << ", expected "
                                             << core::statusCodeName(code) << ": " << status.message();
    }
    for (const std::string& needle : needles) {
        if (status.message().find(needle) == std::string::npos) {
            return ::testing::AssertionFailure() << "\"" << status.message() << "\" lacks \"" << needle << "\"";
        }
    }
    return ::testing::AssertionSuccess();
}

// fromJson of `config` must fail with `code`, naming the source and `field`.
::testing::AssertionResult refused(const json& config, StatusCode code, const std::string& field) {
    return failsWith(parse(config).status(), code, {kSource, field});
}

std::vector<int64_t> moeLayers(const ModelConfig& config) {
    std::vector<int64_t> layers;
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        if (config.isMoeLayer(layer)) layers.push_back(layer);
    }
    return layers;
}

// ---- the two fixture forms ----

TEST(ModelConfigFixture, HubFormOfQwen3_30bA3b) {
    const ModelConfig c = loadOk("qwen3-30b-a3b/config.json");
    EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
    EXPECT_EQ(c.model_type, "qwen3_moe");
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.intermediate_size, 6144);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_EQ(c.num_hidden_layers, 48);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_THAT(c.mlp_only_layers, IsEmpty());
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.max_position_embeddings, 40960);
    EXPECT_EQ(c.dtype, core::DType::kBf16);
    EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
    EXPECT_EQ(c.bos_token_id, 151643);
    EXPECT_EQ(c.qSize(), 4096);
    EXPECT_EQ(c.kvSize(), 512);
    EXPECT_EQ(c.numMoeLayers(), 48);
}

TEST(ModelConfigFixture, Transformers5FormOfTinyCheckpoint) {
    const ModelConfig c = loadOk("qwen3-moe-tiny/model/config.json");
    EXPECT_EQ(c.vocab_size, 384);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.intermediate_size, 96);
    EXPECT_EQ(c.moe_intermediate_size, 32);
    EXPECT_EQ(c.num_hidden_layers, 3);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.num_experts, 8);  // spelled num_local_experts
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);     // spelled rope_parameters.rope_theta
    EXPECT_EQ(c.dtype, core::DType::kBf16);  // spelled dtype
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_THAT(c.eos_token_ids, IsEmpty());
    EXPECT_EQ(c.bos_token_id, -1);
    EXPECT_EQ(c.numMoeLayers(), 3);
}

// ---- defaults of transformers' Qwen3MoeConfig ----

TEST(ModelConfigDefaults, AbsentFieldsTakeTransformersDefaults) {
    const ModelConfig c = parseOk(json{{"model_type", "qwen3_moe"}});
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.intermediate_size, 6144);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_EQ(c.num_hidden_layers, 24);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 64);  // 2048 / 32
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_THAT(c.mlp_only_layers, IsEmpty());
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.max_position_embeddings, 32768);
    EXPECT_EQ(c.dtype, core::DType::kBf16);
    EXPECT_THAT(c.eos_token_ids, IsEmpty());
    EXPECT_EQ(c.bos_token_id, -1);
}

TEST(ModelConfigDefaults, HeadDimFollowsHiddenOverHeadsWhenAbsentOrNull) {
    json config = baseConfig();
    config["hidden_size"] = 96;
    config["num_attention_heads"] = 2;
    config["num_key_value_heads"] = 1;
    config.erase("head_dim");
    EXPECT_EQ(parseOk(config).head_dim, 48);
    config["head_dim"] = nullptr;
    EXPECT_EQ(parseOk(config).head_dim, 48);
}

TEST(ModelConfigDefaults, NullMlpOnlyLayersIsEmpty) {
    json config = baseConfig();
    config["mlp_only_layers"] = nullptr;
    EXPECT_THAT(parseOk(config).mlp_only_layers, IsEmpty());
}

TEST(ModelConfigDefaults, TokenIdsAsIntListOrNull) {
    json config = baseConfig();
    config["eos_token_id"] = json::array({1, 7});
    config["bos_token_id"] = 3;
    ModelConfig c = parseOk(config);
    EXPECT_THAT(c.eos_token_ids, ElementsAre(1, 7));
    EXPECT_EQ(c.bos_token_id, 3);
    config["eos_token_id"] = nullptr;
    config["bos_token_id"] = nullptr;
    c = parseOk(config);
    EXPECT_THAT(c.eos_token_ids, IsEmpty());
    EXPECT_EQ(c.bos_token_id, -1);
}

TEST(ModelConfigDefaults, BothSpellingsWithTheSameValueAreAccepted) {
    json config = baseConfig();
    config["num_local_experts"] = 8;
    config["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
    config["dtype"] = "bfloat16";
    const ModelConfig c = parseOk(config);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST(ModelConfigDefaults, NullOrAbsentDtypeIsBfloat16) {
    json config = baseConfig();
    config["torch_dtype"] = nullptr;
    EXPECT_EQ(parseOk(config).dtype, core::DType::kBf16);
    config.erase("torch_dtype");
    EXPECT_EQ(parseOk(config).dtype, core::DType::kBf16);
}

TEST(ModelConfigDefaults, LegacyTypeKeyOfRopeParameters) {
    json config = baseConfig();
    config.erase("rope_theta");
    config["rope_parameters"] = {{"rope_theta", 5e5}, {"type", "default"}};
    EXPECT_DOUBLE_EQ(parseOk(config).rope_theta, 5e5);
    config["rope_parameters"]["type"] = "linear";
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "rope_parameters.type \"linear\""));
}

TEST(ModelConfigDefaults, ArchitecturesMayListOthersToo) {
    json config = baseConfig();
    config["architectures"] = json::array({"Qwen3MoeModel", "Qwen3MoeForCausalLM"});
    EXPECT_TRUE(parse(config).isOk());
}

// ---- the same field in two spellings with different values ----

TEST(ModelConfigConflict, NumExpertsAndNumLocalExperts) {
    json config = baseConfig();
    config["num_local_experts"] = 16;
    EXPECT_TRUE(failsWith(parse(config).status(), StatusCode::kInvalidArgument,
                          {kSource, "num_experts = 8", "num_local_experts = 16"}));
}

TEST(ModelConfigConflict, RopeThetaAndRopeParameters) {
    json config = baseConfig();
    config["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
    EXPECT_TRUE(failsWith(parse(config).status(), StatusCode::kInvalidArgument,
                          {kSource, "rope_theta = 1000000.0", "rope_parameters.rope_theta = 10000.0"}));
}

TEST(ModelConfigConflict, TorchDtypeAndDtype) {
    json config = baseConfig();
    config["dtype"] = "float16";
    EXPECT_TRUE(failsWith(parse(config).status(), StatusCode::kInvalidArgument,
                          {kSource, "torch_dtype = \"bfloat16\"", "dtype = \"float16\""}));
}

// ---- what the engine does not compute ----

TEST(ModelConfigRefuse, OtherArchitecture) {
    json config = baseConfig();
    config["architectures"] = json::array({"Qwen3ForCausalLM"});
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "architectures [\"Qwen3ForCausalLM\"]"));
}

TEST(ModelConfigRefuse, OtherModelType) {
    json config = baseConfig();
    config["model_type"] = "qwen2_moe";
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "model_type \"qwen2_moe\""));
}

TEST(ModelConfigRefuse, MissingModelType) {
    json config = baseConfig();
    config.erase("model_type");
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument, "model_type is missing"));
}

TEST(ModelConfigRefuse, RopeScaling) {
    json config = baseConfig();
    config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "rope_scaling"));
}

TEST(ModelConfigRefuse, RopeTypeOtherThanDefault) {
    json config = baseConfig();
    config.erase("rope_theta");
    config["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "yarn"}};
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "rope_parameters.rope_type \"yarn\""));
}

TEST(ModelConfigRefuse, ExtraRopeScalingKey) {
    json config = baseConfig();
    config.erase("rope_theta");
    config["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}, {"factor", 2.0}};
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "rope_parameters.factor"));
}

TEST(ModelConfigRefuse, PartialRotaryFactor) {
    json config = baseConfig();
    config["partial_rotary_factor"] = 0.5;
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "partial_rotary_factor"));
}

TEST(ModelConfigRefuse, SlidingWindow) {
    json config = baseConfig();
    config["use_sliding_window"] = true;
    config["sliding_window"] = 4096;
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "use_sliding_window"));
}

TEST(ModelConfigRefuse, LayerTypesOtherThanFullAttention) {
    json config = baseConfig();
    config["layer_types"] = json::array({"full_attention", "sliding_attention", "full_attention", "full_attention"});
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "layer_types[1] \"sliding_attention\""));
}

TEST(ModelConfigRefuse, HiddenActOtherThanSilu) {
    json config = baseConfig();
    config["hidden_act"] = "gelu";
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "hidden_act \"gelu\""));
}

TEST(ModelConfigRefuse, TorchDtypeOtherThanBfloat16) {
    json config = baseConfig();
    config["torch_dtype"] = "float16";
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "torch_dtype \"float16\""));
}

TEST(ModelConfigRefuse, DtypeOtherThanBfloat16) {
    json config = baseConfig();
    config.erase("torch_dtype");
    config["dtype"] = "float32";
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "dtype \"float32\""));
}

TEST(ModelConfigRefuse, QuantizationConfig) {
    json config = baseConfig();
    config["quantization_config"] = {{"quant_method", "fp8"}};
    EXPECT_TRUE(refused(config, StatusCode::kUnsupported, "quantization_config"));
}

TEST(ModelConfigRefuse, NotJson) {
    EXPECT_TRUE(failsWith(ModelConfig::fromJson("{\"model_type\": ", kSource).status(), StatusCode::kCorrupt,
                          {kSource, "not valid JSON"}));
}

TEST(ModelConfigRefuse, NumberBeyondDoubleRangeIsAnError) {
    // The JSON parser reports such a number with an out_of_range exception, which used to escape fromJson.
    for (const char* number : {"1e400", "-1e400"}) {
        const std::string text = std::string(R"({"model_type": "qwen3_moe", "rope_theta": )") + number + "}";
        EXPECT_TRUE(failsWith(ModelConfig::fromJson(text, kSource).status(), StatusCode::kCorrupt,
                              {kSource, "not valid JSON", number}));
    }
}

TEST(ModelConfigRefuse, TopLevelNotAnObject) {
    EXPECT_TRUE(failsWith(ModelConfig::fromJson("[1, 2]", kSource).status(), StatusCode::kCorrupt,
                          {kSource, "must be a JSON object, got array"}));
}

// `"key": [[…]]` with `levels` nested arrays, inside an otherwise plausible config.
std::string configWithNestedArrays(const std::string& key, size_t levels) {
    return R"({"model_type": "qwen3_moe", ")" + key + "\": " + std::string(levels, '[') + std::string(levels, ']') +
           "}";
}

TEST(ModelConfigRefuse, DeepNestingWithoutExhaustingTheStack) {
    // A 2 MB file, far below the size limit. Such values used to be dumped into the error message, one stack
    // frame per level, which crashed the process.
    constexpr size_t kLevels = 1'000'000;
    for (const std::string key : {"rope_scaling", "quantization_config"}) {
        EXPECT_TRUE(failsWith(ModelConfig::fromJson(configWithNestedArrays(key, kLevels), kSource).status(),
                              StatusCode::kCorrupt, {kSource, "nested more than 64 levels deep"}))
            << key;
    }
}

TEST(ModelConfigRefuse, NestingLimitIsSixtyFourLevels) {
    // The top-level object is the first level, so 63 arrays under it are the deepest accepted nesting.
    EXPECT_TRUE(failsWith(ModelConfig::fromJson(configWithNestedArrays("rope_scaling", 63), kSource).status(),
                          StatusCode::kUnsupported, {kSource, "rope_scaling must be null"}));
    EXPECT_TRUE(failsWith(ModelConfig::fromJson(configWithNestedArrays("rope_scaling", 64), kSource).status(),
                          StatusCode::kCorrupt, {kSource, "nested more than 64 levels deep"}));
}

// ---- wrong JSON types: one case per kind of field ----

struct TypeCase {
    const char* name;
    const char* key;
    json value;
    const char* message;  // the exact message after "<source>: "
};

class ModelConfigType : public ::testing::TestWithParam<TypeCase> {};

TEST_P(ModelConfigType, IsRefusedNamingTheFieldAndTheType) {
    json config = baseConfig();
    config[GetParam().key] = GetParam().value;
    const core::Status status = parse(config).status();
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), std::string(kSource) + ": " + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ModelConfigType,
    ::testing::Values(
        TypeCase{"IntAsString", "hidden_size", "64", "hidden_size must be an integer, got string"},
        TypeCase{"IntAsFraction", "num_hidden_layers", 4.5, "num_hidden_layers must be an integer, got number 4.5"},
        TypeCase{"IntAsNull", "num_key_value_heads", nullptr, "num_key_value_heads must be an integer, got null"},
        TypeCase{"IntTooLarge", "vocab_size", std::numeric_limits<uint64_t>::max(),
                 "vocab_size = 18446744073709551615 does not fit a 64-bit signed integer"},
        TypeCase{"BoolAsString", "norm_topk_prob", "true", "norm_topk_prob must be a boolean, got string"},
        TypeCase{"BoolAsInt", "tie_word_embeddings", 1, "tie_word_embeddings must be a boolean, got number 1"},
        TypeCase{"NumberAsString", "rms_norm_eps", "1e-6", "rms_norm_eps must be a number, got string"},
        TypeCase{"StringAsInt", "hidden_act", 1, "hidden_act must be a string, got number 1"},
        TypeCase{"ListAsInt", "mlp_only_layers", 1, "mlp_only_layers must be a list of integers, got number 1"},
        TypeCase{"ListEntry", "mlp_only_layers", json::array({1, "2"}),
                 "mlp_only_layers[1] must be an integer, got string"},
        TypeCase{"EosAsString", "eos_token_id", "</s>",
                 "eos_token_id must be an integer or a list of integers, got string"},
        TypeCase{"ArchitecturesAsString", "architectures", "Qwen3MoeForCausalLM",
                 "architectures must be a list of strings, got string"},
        TypeCase{"RopeParametersAsNumber", "rope_parameters", 1e6,
                 "rope_parameters must be an object, got number 1000000.0"}),
    [](const ::testing::TestParamInfo<TypeCase>& info) { return std::string(info.param.name); });

// ---- validate(): sizes and ratios ----

class ModelConfigSize : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelConfigSize, NonPositiveIsRefused) {
    for (const int64_t bad : {0, -1}) {
        json config = baseConfig();
        config[GetParam()] = bad;
        EXPECT_TRUE(
            refused(config, StatusCode::kInvalidArgument, fmt::format("{} must be positive, got {}", GetParam(), bad)));
    }
}

TEST_P(ModelConfigSize, AboveInt32IsRefused) {
    json config = baseConfig();
    config[GetParam()] = int64_t{1} << 31;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument,
                        fmt::format("{} must be at most 2147483647, got 2147483648", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Fields, ModelConfigSize,
                         ::testing::Values("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
                                           "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                           "head_dim", "num_experts", "num_experts_per_tok",
                                           "max_position_embeddings"));

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
    EXPECT_THAT(ModelConfig::presetNames(), ElementsAre("tiny", "small", "qwen3-30b-a3b"));
    for (const std::string& name : ModelConfig::presetNames()) EXPECT_TRUE(ModelConfig::preset(name).isOk()) << name;
    EXPECT_TRUE(failsWith(ModelConfig::preset("huge").status(), StatusCode::kNotFound,
                          {"\"huge\"", "tiny, small, qwen3-30b-a3b"}));
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
