#include "model/model_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/json_fields.h"
#include "core/mapped_file.h"

namespace afd::model {
namespace {

using core::JsonNull;
using core::JsonObjectReader;
using core::Status;
using nlohmann::json;

constexpr std::string_view kArchitecture = "Qwen3MoeForCausalLM";
constexpr std::string_view kModelType = "qwen3_moe";
constexpr std::string_view kWeightDType = "bfloat16";
// Kernels index with 32-bit ints; every size must fit one.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
// A config.json is a few KiB; anything this large is not one.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;
// Objects and arrays nest at most this deep (a config.json nests three levels). Deeper documents are refused
// while parsing, before anything walks them recursively: dump() for an error message recurses once per level.
constexpr int kMaxJsonDepth = 64;

// A field with two spellings (hub form and transformers 5.x form), read by T's rule. Both present with different
// values is an error naming both; `*out` keeps the default when neither is present.
template <typename T>
Status readEither(const JsonObjectReader& root, std::string_view key_a, std::string_view key_b, T* out,
                  JsonNull null = JsonNull::kIsAValue) {
    T value_a = *out;
    T value_b = *out;
    AFD_RETURN_IF_ERROR(root.read(key_a, &value_a, null));
    AFD_RETURN_IF_ERROR(root.read(key_b, &value_b, null));
    const json* a = root.find(key_a, null);
    const json* b = root.find(key_b, null);
    if (a != nullptr && b != nullptr && value_a != value_b) {
        return core::invalidArgument("{} = {} and {} = {} disagree", key_a, a->dump(), key_b, b->dump());
    }
    *out = b != nullptr ? value_b : value_a;
    return Status::ok();
}

// ---- the parts of config.json this engine checks or reads ----

Status readIdentity(const JsonObjectReader& root) {
    if (const json* archs = root.find("architectures", JsonNull::kMeansAbsent)) {
        AFD_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                             core::jsonAs<std::vector<std::string>>(*archs, "architectures"));
        if (std::find(names.begin(), names.end(), kArchitecture) == names.end()) {
            return core::unsupported("architectures {} does not contain \"{}\", the only architecture computed here",
                                     archs->dump(), kArchitecture);
        }
    }
    const json* model_type = root.find("model_type");
    if (model_type == nullptr) return core::invalidArgument("model_type is missing (expected \"{}\")", kModelType);
    AFD_ASSIGN_OR_RETURN(const std::string type, core::jsonAs<std::string>(*model_type, "model_type"));
    if (type != kModelType) {
        return core::unsupported("model_type \"{}\" is not \"{}\", the only model type computed here", type,
                                 kModelType);
    }
    return Status::ok();
}

// Plain RoPE only: rope_scaling null, rope_parameters {rope_theta, rope_type "default"}, no partial rotary.
Status readRope(const JsonObjectReader& root, double* rope_theta) {
    if (const json* scaling = root.find("rope_scaling", JsonNull::kMeansAbsent)) {
        return core::unsupported("rope_scaling must be null (RoPE scaling is not computed), got {}", scaling->dump());
    }
    double top_theta = *rope_theta;
    const json* top = root.find("rope_theta");
    AFD_RETURN_IF_ERROR(root.read("rope_theta", &top_theta));

    double nested_theta = *rope_theta;
    const json* nested = nullptr;
    if (const json* value = root.find("rope_parameters", JsonNull::kMeansAbsent)) {
        AFD_ASSIGN_OR_RETURN(const JsonObjectReader params, JsonObjectReader::of(*value, "rope_parameters"));
        for (const auto& [key, item] : params.object().items()) {
            if (key == "rope_theta") {
                nested = &item;
                AFD_RETURN_IF_ERROR(params.read(key, &nested_theta));
            } else if (key == "rope_type" || key == "type") {
                std::string type;
                AFD_RETURN_IF_ERROR(params.read(key, &type));
                if (type != "default") {
                    return core::unsupported("{} \"{}\" is not supported (only \"default\" RoPE is computed)",
                                             params.name(key), type);
                }
            } else {
                return core::unsupported("{} is not supported (only rope_theta and rope_type \"default\" are)",
                                         params.name(key));
            }
        }
    }
    if (top != nullptr && nested != nullptr && top_theta != nested_theta) {
        return core::invalidArgument("rope_theta = {} and rope_parameters.rope_theta = {} disagree", top->dump(),
                                     nested->dump());
    }
    *rope_theta = nested != nullptr ? nested_theta : top_theta;

    double partial = 1.0;
    AFD_RETURN_IF_ERROR(root.read("partial_rotary_factor", &partial, JsonNull::kMeansAbsent));
    if (partial != 1.0) return core::unsupported("partial_rotary_factor {} is not supported (only 1.0 is)", partial);
    return Status::ok();
}

// Features outside plain Qwen3-MoE: sliding window, other activations, dtypes, quantisation, layer types.
Status readFeatures(const JsonObjectReader& root, core::DType* dtype) {
    bool sliding = false;
    AFD_RETURN_IF_ERROR(root.read("use_sliding_window", &sliding));
    if (sliding) return core::unsupported("use_sliding_window true is not supported (sliding-window attention)");

    std::string act = "silu";
    AFD_RETURN_IF_ERROR(root.read("hidden_act", &act));
    if (act != "silu") return core::unsupported("hidden_act \"{}\" is not supported (only \"silu\" is)", act);

    std::string weight_dtype(kWeightDType);
    AFD_RETURN_IF_ERROR(readEither(root, "torch_dtype", "dtype", &weight_dtype, JsonNull::kMeansAbsent));
    if (weight_dtype != kWeightDType) {
        const char* key = root.find("torch_dtype", JsonNull::kMeansAbsent) != nullptr ? "torch_dtype" : "dtype";
        return core::unsupported("{} \"{}\" is not supported (weights must be \"{}\")", key, weight_dtype,
                                 kWeightDType);
    }
    *dtype = core::DType::kBf16;

    if (const json* quant = root.find("quantization_config", JsonNull::kMeansAbsent)) {
        return core::unsupported("quantization_config is not supported (unquantised bfloat16 weights only), got {}",
                                 quant->dump());
    }
    std::vector<std::string> types;
    AFD_RETURN_IF_ERROR(root.read("layer_types", &types, JsonNull::kMeansAbsent));
    for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] != "full_attention") {
            return core::unsupported("layer_types[{}] \"{}\" is not supported (only \"full_attention\" is)", i,
                                     types[i]);
        }
    }
    return Status::ok();
}

// eos_token_id is one id or a list of ids (transformers writes an int for one); bos_token_id one id or null.
Status readTokenIds(const JsonObjectReader& root, ModelConfig* c) {
    c->eos_token_ids.clear();
    if (const json* eos = root.find("eos_token_id", JsonNull::kMeansAbsent)) {
        if (eos->is_array()) {
            AFD_ASSIGN_OR_RETURN(c->eos_token_ids, core::jsonAs<std::vector<int64_t>>(*eos, "eos_token_id"));
        } else {
            if (!eos->is_number_integer()) {
                return core::jsonTypeError(*eos, "eos_token_id", "an integer or a list of integers");
            }
            AFD_ASSIGN_OR_RETURN(const int64_t id, core::jsonAs<int64_t>(*eos, "eos_token_id"));
            c->eos_token_ids.push_back(id);
        }
    }
    c->bos_token_id = -1;
    return root.read("bos_token_id", &c->bos_token_id, JsonNull::kMeansAbsent);
}

// Everything but validate(); defaults are transformers' Qwen3MoeConfig ones (see the header).
core::Result<ModelConfig> parseConfig(std::string_view text) {
    bool too_deep = false;
    const json::parser_callback_t callback = [&too_deep](int depth, json::parse_event_t event, json& /*parsed*/) {
        const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
        if (!opens || depth < kMaxJsonDepth) return true;
        too_deep = true;
        return false;  // the subtree is not kept
    };
    json document;
    try {
        document = json::parse(text.begin(), text.end(), callback);
    } catch (const json::exception& e) {  // parse_error; out_of_range for a number beyond double's range
        return core::corrupt("not valid JSON: {}", e.what());
    }
    if (too_deep) return core::corrupt("objects and arrays are nested more than {} levels deep", kMaxJsonDepth);
    if (!document.is_object()) {
        return core::corrupt("the top level must be a JSON object, got {}", document.type_name());
    }
    const JsonObjectReader root(document, "");

    ModelConfig c;
    AFD_RETURN_IF_ERROR(readIdentity(root));
    c.rope_theta = 10000.0;
    AFD_RETURN_IF_ERROR(readRope(root, &c.rope_theta));
    AFD_RETURN_IF_ERROR(readFeatures(root, &c.dtype));

    c.vocab_size = 151936;
    c.hidden_size = 2048;
    c.intermediate_size = 6144;
    c.moe_intermediate_size = 768;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.decoder_sparse_step = 1;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-6;
    c.norm_topk_prob = false;
    c.tie_word_embeddings = false;
    c.attention_bias = false;
    const std::pair<const char*, int64_t*> ints[] = {
        {"vocab_size", &c.vocab_size},
        {"hidden_size", &c.hidden_size},
        {"intermediate_size", &c.intermediate_size},
        {"moe_intermediate_size", &c.moe_intermediate_size},
        {"num_hidden_layers", &c.num_hidden_layers},
        {"num_attention_heads", &c.num_attention_heads},
        {"num_key_value_heads", &c.num_key_value_heads},
        {"num_experts_per_tok", &c.num_experts_per_tok},
        {"decoder_sparse_step", &c.decoder_sparse_step},
        {"max_position_embeddings", &c.max_position_embeddings},
    };
    for (const auto& [key, out] : ints) AFD_RETURN_IF_ERROR(root.read(key, out));
    AFD_RETURN_IF_ERROR(readEither(root, "num_experts", "num_local_experts", &c.num_experts));

    // transformers' attention takes hidden_size / num_attention_heads (floor) when head_dim is absent.
    c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
    AFD_RETURN_IF_ERROR(root.read("head_dim", &c.head_dim, JsonNull::kMeansAbsent));

    const std::pair<const char*, bool*> bools[] = {
        {"norm_topk_prob", &c.norm_topk_prob},
        {"tie_word_embeddings", &c.tie_word_embeddings},
        {"attention_bias", &c.attention_bias},
    };
    for (const auto& [key, out] : bools) AFD_RETURN_IF_ERROR(root.read(key, out));
    AFD_RETURN_IF_ERROR(root.read("rms_norm_eps", &c.rms_norm_eps));
    c.mlp_only_layers.clear();
    AFD_RETURN_IF_ERROR(root.read("mlp_only_layers", &c.mlp_only_layers, JsonNull::kMeansAbsent));
    AFD_RETURN_IF_ERROR(readTokenIds(root, &c));
    return c;
}

// ---- checked arithmetic for the parameter count ----

std::optional<int64_t> mulChecked(std::initializer_list<int64_t> factors) {
    int64_t product = 1;
    for (const int64_t f : factors) {
        if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
    }
    return product;
}

// nullopt when a tensor's element count or the total overflows int64_t.
std::optional<int64_t> countParameters(const ModelConfig& c) {
    const int64_t h = c.hidden_size;
    std::vector<std::optional<int64_t>> layer_terms = {
        mulChecked({2, h}),                                     // input_layernorm, post_attention_layernorm
        mulChecked({h, c.num_attention_heads, c.head_dim}),     // q_proj
        mulChecked({2, h, c.num_key_value_heads, c.head_dim}),  // k_proj, v_proj
        mulChecked({c.num_attention_heads, c.head_dim, h}),     // o_proj
        mulChecked({2, c.head_dim}),                            // q_norm, k_norm
    };
    if (c.attention_bias) {
        layer_terms.push_back(mulChecked({c.num_attention_heads, c.head_dim}));
        layer_terms.push_back(mulChecked({2, c.num_key_value_heads, c.head_dim}));
        layer_terms.push_back(h);
    }
    int64_t attention = 0;
    for (const auto& term : layer_terms) {
        if (!term || __builtin_add_overflow(attention, *term, &attention)) return std::nullopt;
    }
    const auto gate = mulChecked({c.num_experts, h});
    const auto experts = mulChecked({c.num_experts, 3, h, c.moe_intermediate_size});
    const auto dense = mulChecked({3, h, c.intermediate_size});
    const auto embedding = mulChecked({c.vocab_size, h});
    if (!gate || !experts || !dense || !embedding) return std::nullopt;

    int64_t moe_layer = 0;
    int64_t dense_layer = 0;
    if (__builtin_add_overflow(attention, *gate, &moe_layer) ||
        __builtin_add_overflow(moe_layer, *experts, &moe_layer) ||
        __builtin_add_overflow(attention, *dense, &dense_layer)) {
        return std::nullopt;
    }
    // embed_tokens, lm_head unless tied, the final norm
    int64_t total = c.tie_word_embeddings ? 0 : *embedding;
    if (__builtin_add_overflow(total, *embedding, &total) || __builtin_add_overflow(total, h, &total)) {
        return std::nullopt;
    }
    const int64_t num_moe = c.numMoeLayers();
    const auto moe_total = mulChecked({num_moe, moe_layer});
    const auto dense_total = mulChecked({c.num_hidden_layers - num_moe, dense_layer});
    if (!moe_total || !dense_total || __builtin_add_overflow(total, *moe_total, &total) ||
        __builtin_add_overflow(total, *dense_total, &total)) {
        return std::nullopt;
    }
    return total;
}

}  // namespace

bool ModelConfig::isMoeLayer(int64_t layer) const {
    AFD_CHECK(layer >= 0 && layer < num_hidden_layers, "layer {} outside [0, {})", layer, num_hidden_layers);
    AFD_CHECK(decoder_sparse_step >= 1, "decoder_sparse_step {} < 1 (validate() refuses it)", decoder_sparse_step);
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
    return num_experts > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::numMoeLayers() const {
    AFD_CHECK(decoder_sparse_step >= 1, "decoder_sparse_step {} < 1 (validate() refuses it)", decoder_sparse_step);
    if (num_experts <= 0 || num_hidden_layers <= 0) return 0;
    // Counted without visiting every layer: num_hidden_layers comes from an untrusted file.
    const std::set<int64_t> dense(mlp_only_layers.begin(), mlp_only_layers.end());
    int64_t count = num_hidden_layers / decoder_sparse_step;
    for (const int64_t layer : dense) {
        if (layer >= 0 && layer < num_hidden_layers && (layer + 1) % decoder_sparse_step == 0) --count;
    }
    return count;
}

int64_t ModelConfig::numParameters() const {
    const std::optional<int64_t> count = countParameters(*this);
    AFD_CHECK(count.has_value(), "the parameter count overflows int64 (validate() refuses such a config)");
    return *count;
}

Status ModelConfig::validate() const {
    if (architecture != kArchitecture) {
        return core::unsupported("architecture \"{}\" is not \"{}\"", architecture, kArchitecture);
    }
    if (model_type != kModelType) return core::unsupported("model_type \"{}\" is not \"{}\"", model_type, kModelType);
    if (dtype != core::DType::kBf16) {
        return core::unsupported("dtype {} is not supported (weights must be BF16)", core::dtypeName(dtype));
    }
    const std::pair<const char*, int64_t> sizes[] = {
        {"vocab_size", vocab_size},
        {"hidden_size", hidden_size},
        {"intermediate_size", intermediate_size},
        {"moe_intermediate_size", moe_intermediate_size},
        {"num_hidden_layers", num_hidden_layers},
        {"num_attention_heads", num_attention_heads},
        {"num_key_value_heads", num_key_value_heads},
        {"head_dim", head_dim},
        {"num_experts", num_experts},
        {"num_experts_per_tok", num_experts_per_tok},
        {"max_position_embeddings", max_position_embeddings},
    };
    for (const auto& [name, value] : sizes) AFD_RETURN_IF_ERROR(core::checkInRange(name, value, 1, kMaxSize));
    AFD_RETURN_IF_ERROR(core::checkInRange("decoder_sparse_step", decoder_sparse_step, 1, kMaxSize));
    if (num_attention_heads % num_key_value_heads != 0) {
        return core::invalidArgument("num_attention_heads ({}) must be divisible by num_key_value_heads ({})",
                                     num_attention_heads, num_key_value_heads);
    }
    if (num_experts_per_tok > num_experts) {
        return core::invalidArgument("num_experts_per_tok ({}) must be at most num_experts ({})", num_experts_per_tok,
                                     num_experts);
    }
    if (head_dim % 2 != 0) return core::invalidArgument("head_dim must be even for RoPE, got {}", head_dim);
    if (!std::isfinite(rms_norm_eps) || rms_norm_eps <= 0) {
        return core::invalidArgument("rms_norm_eps must be a positive finite number, got {}", rms_norm_eps);
    }
    if (!std::isfinite(rope_theta) || rope_theta <= 0) {
        return core::invalidArgument("rope_theta must be a positive finite number, got {}", rope_theta);
    }
    std::set<int64_t> seen;
    for (const int64_t layer : mlp_only_layers) {
        if (layer < 0 || layer >= num_hidden_layers) {
            return core::invalidArgument("mlp_only_layers entry {} is outside [0, num_hidden_layers = {})", layer,
                                         num_hidden_layers);
        }
        if (!seen.insert(layer).second) return core::invalidArgument("mlp_only_layers lists layer {} twice", layer);
    }
    for (const int64_t id : eos_token_ids) {
        if (id < 0 || id >= vocab_size) {
            return core::invalidArgument("eos_token_id {} is outside [0, vocab_size = {})", id, vocab_size);
        }
    }
    if (bos_token_id != -1 && (bos_token_id < 0 || bos_token_id >= vocab_size)) {
        return core::invalidArgument("bos_token_id {} is outside [0, vocab_size = {})", bos_token_id, vocab_size);
    }
    if (!countParameters(*this)) return core::invalidArgument("the parameter count of these sizes overflows 64 bits");
    return Status::ok();
}

core::Result<ModelConfig> ModelConfig::fromJson(std::string_view text, std::string_view source) {
    core::Result<ModelConfig> config = parseConfig(text);
    if (!config) return config.status().withContext(source);
    const Status valid = config->validate();
    if (!valid) return valid.withContext(source);
    return config;
}

core::Result<ModelConfig> ModelConfig::fromFile(const std::string& path) {
    AFD_ASSIGN_OR_RETURN(const std::shared_ptr<core::MappedFile> file, core::MappedFile::open(path));
    if (file->size() > kMaxConfigBytes) {
        return core::invalidArgument("{}: {} bytes is more than a config.json may hold ({} bytes)", path, file->size(),
                                     kMaxConfigBytes);
    }
    const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
    return fromJson(text, path);
}

namespace {

// The published Qwen3-30B-A3B config.json (hub form).
ModelConfig presetQwen3_30bA3b() {
    ModelConfig c;
    c.vocab_size = 151936;
    c.hidden_size = 2048;
    c.intermediate_size = 6144;
    c.moe_intermediate_size = 768;
    c.num_hidden_layers = 48;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.head_dim = 128;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.norm_topk_prob = true;
    c.rope_theta = 1e6;
    c.max_position_embeddings = 40960;
    c.eos_token_ids = {151645};
    c.bos_token_id = 151643;
    return c;
}

// See the header for the choice of the tiny and small shapes.
ModelConfig presetTiny() {
    ModelConfig c;
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.moe_intermediate_size = 32;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.norm_topk_prob = true;
    c.rope_theta = 1e6;
    c.max_position_embeddings = 4096;
    return c;
}

// The tiny shape with Qwen3's vocabulary and special ids, so that the Qwen3 tokenizer's every id is a row of it.
ModelConfig presetTinyChat() {
    ModelConfig c = presetTiny();
    c.vocab_size = 151936;
    c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
    c.bos_token_id = 151643;
    return c;
}

ModelConfig presetSmall() {
    ModelConfig c;
    c.vocab_size = 8192;
    c.hidden_size = 512;
    c.intermediate_size = 1024;
    c.moe_intermediate_size = 192;
    c.num_hidden_layers = 8;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 64;
    c.num_experts = 32;
    c.num_experts_per_tok = 4;
    c.norm_topk_prob = true;
    c.rope_theta = 1e6;
    c.max_position_embeddings = 8192;
    return c;
}

}  // namespace

core::Result<ModelConfig> ModelConfig::preset(std::string_view name) {
    if (name == "qwen3-30b-a3b") return presetQwen3_30bA3b();
    if (name == "tiny") return presetTiny();
    if (name == "tiny-chat") return presetTinyChat();
    if (name == "small") return presetSmall();
    return core::notFound("no model preset named \"{}\" (presets: {})", name, fmt::join(presetNames(), ", "));
}

std::vector<std::string> ModelConfig::presetNames() { return {"tiny", "tiny-chat", "small", "qwen3-30b-a3b"}; }

std::string ModelConfig::toJson() const {
    AFD_CHECK(dtype == core::DType::kBf16, "toJson of a {} config (validate() refuses it)", core::dtypeName(dtype));
    json j;
    j["architectures"] = json::array({architecture});
    j["model_type"] = model_type;
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["num_hidden_layers"] = num_hidden_layers;
    j["num_attention_heads"] = num_attention_heads;
    j["num_key_value_heads"] = num_key_value_heads;
    j["head_dim"] = head_dim;
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
    j["norm_topk_prob"] = norm_topk_prob;
    j["tie_word_embeddings"] = tie_word_embeddings;
    j["attention_bias"] = attention_bias;
    j["rms_norm_eps"] = rms_norm_eps;
    j["rope_theta"] = rope_theta;
    j["rope_scaling"] = nullptr;
    j["max_position_embeddings"] = max_position_embeddings;
    j["max_window_layers"] = num_hidden_layers;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["hidden_act"] = "silu";
    j["torch_dtype"] = kWeightDType;
    j["attention_dropout"] = 0.0;
    j["initializer_range"] = 0.02;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
    j["use_cache"] = true;
    if (eos_token_ids.empty()) {
        j["eos_token_id"] = nullptr;
    } else if (eos_token_ids.size() == 1) {
        j["eos_token_id"] = eos_token_ids.front();
    } else {
        j["eos_token_id"] = eos_token_ids;
    }
    j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
    return j.dump(2) + "\n";
}

}  // namespace afd::model
