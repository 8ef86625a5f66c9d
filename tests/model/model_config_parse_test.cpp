// config.json parsing: both forms, defaults, conflicts, refusals, types and sizes.
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

TEST(ModelConfigDefaults, AnIntegerIsANumber) {
    // Hub configs write rope_theta either way (1000000 or 1000000.0).
    json config = baseConfig();
    config["rope_theta"] = 500000;
    config["rms_norm_eps"] = 1;
    const ModelConfig c = parseOk(config);
    EXPECT_DOUBLE_EQ(c.rope_theta, 5e5);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1.0);
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
        TypeCase{"IntAsWord", "hidden_size", "sixty-four",
                 R"(hidden_size must be an integer, got string "sixty-four")"},
        TypeCase{"IntAsFraction", "num_hidden_layers", 4.5, "num_hidden_layers must be an integer, got number 4.5"},
        TypeCase{"IntAsWholeFloat", "hidden_size", 64.0, "hidden_size must be an integer, got number 64.0"},
        TypeCase{"IntAsNull", "num_key_value_heads", nullptr, "num_key_value_heads must be an integer, got null"},
        TypeCase{"IntTooLarge", "vocab_size", std::numeric_limits<uint64_t>::max(),
                 "vocab_size must be an integer in the 64-bit signed range, got number 18446744073709551615"},
        TypeCase{
            "BoolAsWord", "norm_topk_prob", "maybe",
            R"(norm_topk_prob must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got string "maybe")"},
        TypeCase{"BoolAsTwo", "tie_word_embeddings", 2,
                 "tie_word_embeddings must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, "
                 "on/off), got number 2"},
        TypeCase{"NumberAsWord", "rms_norm_eps", "tiny", R"(rms_norm_eps must be a number, got string "tiny")"},
        TypeCase{"StringAsInt", "hidden_act", 1, "hidden_act must be a string, got number 1"},
        TypeCase{"ListAsInt", "mlp_only_layers", 1, "mlp_only_layers must be a list of integers, got number 1"},
        TypeCase{"ListEntry", "mlp_only_layers", json::array({1, "2x"}),
                 R"(mlp_only_layers[1] must be an integer, got string "2x")"},
        TypeCase{"EosAsString", "eos_token_id", "</s>",
                 R"(eos_token_id must be an integer or a list of integers, got string "</s>")"},
        TypeCase{"EosEntryAsFloat", "eos_token_id", json::array({1, 2.5}),
                 "eos_token_id[1] must be an integer, got number 2.5"},
        TypeCase{"ArchitecturesAsString", "architectures", "Qwen3MoeForCausalLM",
                 R"(architectures must be a list of strings, got string "Qwen3MoeForCausalLM")"},
        TypeCase{"LayerTypesEntryAsInt", "layer_types", json::array({"full_attention", 0}),
                 "layer_types[1] must be a string, got number 0"},
        TypeCase{"NestedRopeThetaAsString", "rope_parameters", json{{"rope_theta", "1e6x"}},
                 R"(rope_parameters.rope_theta must be a number, got string "1e6x")"},
        TypeCase{"RopeParametersAsNumber", "rope_parameters", 1e6,
                 "rope_parameters must be an object, got number 1000000.0"}),
    [](const ::testing::TestParamInfo<TypeCase>& info) { return std::string(info.param.name); });

// ---- validate(): sizes and ratios ----

class ModelConfigSize : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelConfigSize, NonPositiveIsRefused) {
    for (const int64_t bad : {0, -1}) {
        json config = baseConfig();
        config[GetParam()] = bad;
        EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument,
                            fmt::format("{} must be in [1, 2147483647], got {}", GetParam(), bad)));
    }
}

TEST_P(ModelConfigSize, AboveInt32IsRefused) {
    json config = baseConfig();
    config[GetParam()] = int64_t{1} << 31;
    EXPECT_TRUE(refused(config, StatusCode::kInvalidArgument,
                        fmt::format("{} must be in [1, 2147483647], got 2147483648", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Fields, ModelConfigSize,
                         ::testing::Values("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
                                           "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                           "head_dim", "num_experts", "num_experts_per_tok",
                                           "max_position_embeddings"));

}  // namespace
}  // namespace afd::model
