// libFuzzer target: ModelConfig::fromJson on arbitrary text (the whole input is a config.json). Beyond "no crash,
// no sanitizer report, no exception", an accepted config must be one the engine can use: it passes validate(),
// every layer has an answer to isMoeLayer() and the answers agree with numMoeLayers() and the HF rule, the
// parameter count is defined, and toJson() parses back to an equal config and is a fixed point. A violation traps.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/model_config.h"

namespace {

using afd::model::ModelConfig;

// Configs with more layers are checked on their first and last layers and on every mlp_only_layers entry:
// visiting two billion layers per input would stall the fuzzer.
constexpr int64_t kMaxVisitedLayers = 4096;

void require(bool condition) {
    if (!condition) __builtin_trap();
}

// The HF rule, written out independently of ModelConfig::isMoeLayer.
bool expectedMoe(const ModelConfig& c, int64_t layer) {
    const bool dense_listed =
        std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), layer) != c.mlp_only_layers.end();
    return !dense_listed && (layer + 1) % c.decoder_sparse_step == 0;
}

void checkLayers(const ModelConfig& c) {
    const int64_t layers = c.num_hidden_layers;
    if (layers <= kMaxVisitedLayers) {
        int64_t moe = 0;
        for (int64_t layer = 0; layer < layers; ++layer) {
            const bool is_moe = c.isMoeLayer(layer);
            require(is_moe == expectedMoe(c, layer));
            moe += is_moe ? 1 : 0;
        }
        require(moe == c.numMoeLayers());
        return;
    }
    for (int64_t i = 0; i < kMaxVisitedLayers / 2; ++i) {
        require(c.isMoeLayer(i) == expectedMoe(c, i));
        require(c.isMoeLayer(layers - 1 - i) == expectedMoe(c, layers - 1 - i));
    }
    for (const int64_t layer : c.mlp_only_layers) require(!c.isMoeLayer(layer));
    const int64_t moe = c.numMoeLayers();
    require(moe >= 0 && moe <= layers / c.decoder_sparse_step);
}

void checkAccepted(const ModelConfig& c) {
    require(c.validate().isOk());
    checkLayers(c);
    require(c.numParameters() > 0);

    const std::string text = c.toJson();
    const auto again = ModelConfig::fromJson(text, "fuzz round trip");
    require(again.isOk());
    require(again.value() == c);
    require(again.value().toJson() == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto result = ModelConfig::fromJson(text, "fuzz");
    if (result.isOk()) {
        checkAccepted(result.value());
    } else {
        require(result.status().message().rfind("fuzz: ", 0) == 0);  // every error names its source
    }
    return 0;
}
