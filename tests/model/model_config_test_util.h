// Helpers shared by the model config tests.
#pragma once

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

namespace afd::model::testing {

using core::StatusCode;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

inline constexpr const char* kSource = "dir/config.json";

inline std::string dataPath(const std::string& relative) { return std::string(AFD_TEST_DATA) + "/" + relative; }

// The tiny shape in hub form, as a transformers save_pretrained would write it; tests change one field.
inline json baseConfig() {
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

inline core::Result<ModelConfig> parse(const json& config) { return ModelConfig::fromJson(config.dump(), kSource); }

inline ModelConfig parseOk(const json& config) {
    core::Result<ModelConfig> result = parse(config);
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    return result.isOk() ? result.value() : ModelConfig{};
}

inline ModelConfig loadOk(const std::string& relative) {
    core::Result<ModelConfig> result = ModelConfig::fromFile(dataPath(relative));
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    return result.isOk() ? result.value() : ModelConfig{};
}

// Success when `status` has `code` and a message holding every one of `needles`.
inline ::testing::AssertionResult failsWith(const core::Status& status, StatusCode code,
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
inline ::testing::AssertionResult refused(const json& config, StatusCode code, const std::string& field) {
    return failsWith(parse(config).status(), code, {kSource, field});
}

inline std::vector<int64_t> moeLayers(const ModelConfig& config) {
    std::vector<int64_t> layers;
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        if (config.isMoeLayer(layer)) layers.push_back(layer);
    }
    return layers;
}

// ---- the two fixture forms ----

}  // namespace afd::model::testing
