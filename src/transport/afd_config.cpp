#include "transport/afd_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/check.h"
#include "core/mapped_file.h"

namespace afd::transport {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;
constexpr size_t kMaxShownValueChars = 64;
// Objects and arrays nest at most this deep (an AFD config nests three levels). Deeper documents are refused
// right after parsing, before anything walks them recursively: shown() dumps a value, recursing once per level.
constexpr int kMaxJsonDepth = 64;

// A canonical key and its legacy alias (empty when it has none).
struct KeySpec {
    std::string_view canonical;
    std::string_view alias;
};

constexpr std::array<KeySpec, 11> kKeys = {{
    {"role", "afd_role"},
    {"connector", "afd_connector"},
    {"host", "afd_host"},
    {"port", "afd_port"},
    {"num_attention_ranks", ""},
    {"num_ffn_ranks", ""},
    {"compute_gate_on_attention", ""},
    {"max_num_tokens", ""},
    {"connect_timeout_s", ""},
    {"step_timeout_s", ""},
    {"connector_extra_config", ""},
}};

constexpr std::string_view kTcpExtraKeys = "bind_host, advertise_host";

// JSON text of a value for an error message, cut to a readable length.
std::string shown(const Json& value) {
    std::string text = value.dump();
    if (text.size() > kMaxShownValueChars) text = text.substr(0, kMaxShownValueChars) + "...";
    return text;
}

std::string trimLower(std::string_view text) {
    const auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

// Parses JSON text; a key repeated inside one object is an error (the parser would keep the last silently).
core::Result<Json> parseJsonText(std::string_view text, std::string_view source) {
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    bool too_deep = false;
    auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth) {
            too_deep = true;
        }
        if (event == Json::parse_event_t::object_start) {
            open_objects.emplace_back();
        } else if (event == Json::parse_event_t::object_end) {
            if (!open_objects.empty()) open_objects.pop_back();
        } else if (event == Json::parse_event_t::key && !open_objects.empty()) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        }
        return true;
    };
    Json json;
    try {
        json = Json::parse(text.begin(), text.end(), callback);
    } catch (const Json::exception& e) {  // parse errors, and numbers beyond double's range
        // e.what() gives the byte position and what the parser expected there.
        return core::invalidArgument("{}: not valid JSON: {}", source, e.what());
    }
    if (too_deep) {
        return core::invalidArgument("{}: objects and arrays are nested more than {} levels deep", source,
                                     kMaxJsonDepth);
    }
    if (!duplicate.empty()) return core::invalidArgument("{}: key '{}' appears twice in one object", source, duplicate);
    return json;
}

core::Result<int64_t> coerceInt(const Json& value, std::string_view source, std::string_view key) {
    if (value.is_number_unsigned()) {
        const uint64_t v = value.get<uint64_t>();
        if (v > static_cast<uint64_t>(INT64_MAX)) {
            return core::invalidArgument("{}: afd.{} must be an integer in the 64-bit range, got {}", source, key, v);
        }
        return static_cast<int64_t>(v);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_string()) {
        const std::string text = trimLower(value.get_ref<const std::string&>());
        std::string_view digits = text;
        // One sign at most: "+5" and "-5" are integers, "+-5" is not.
        if (digits.size() > 1 && digits.front() == '+' && digits[1] != '-') digits.remove_prefix(1);
        int64_t parsed = 0;
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
        if (!digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size()) return parsed;
    }
    return core::invalidArgument("{}: afd.{} must be an integer (a JSON integer or an integer string), got {}", source,
                                 key, shown(value));
}

core::Result<bool> coerceBool(const Json& value, std::string_view source, std::string_view key) {
    if (value.is_boolean()) return value.get<bool>();
    if (value.is_number_unsigned()) {
        const uint64_t v = value.get<uint64_t>();
        if (v <= 1) return v == 1;
    } else if (value.is_number_integer()) {
        const int64_t v = value.get<int64_t>();
        if (v == 0 || v == 1) return v == 1;
    } else if (value.is_string()) {
        const std::string text = trimLower(value.get_ref<const std::string&>());
        if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
        if (text == "0" || text == "false" || text == "no" || text == "off") return false;
    }
    return core::invalidArgument(
        "{}: afd.{} must be a boolean (true/false, 0/1, or one of the strings 1/true/yes/on/0/false/no/off), got {}",
        source, key, shown(value));
}

core::Result<std::string> requireString(const Json& value, std::string_view source, std::string_view key) {
    if (!value.is_string())
        return core::invalidArgument("{}: afd.{} must be a string, got {}", source, key, shown(value));
    return value.get<std::string>();
}

// Range rules shared by parsing (before narrowing to int) and validate().
core::Status checkCount(std::string_view key, int64_t value) {
    if (value <= 0) return core::invalidArgument("afd.{} must be > 0, got {}", key, value);
    if (value > Topology::kMaxRanks) {
        return core::invalidArgument("afd.{} must be <= {}, got {}", key, Topology::kMaxRanks, value);
    }
    return core::Status::ok();
}

core::Status checkPort(std::string_view key, int64_t value) {
    if (value <= 0 || value >= 65536)
        return core::invalidArgument("afd.{} must satisfy 0 < port < 65536, got {}", key, value);
    return core::Status::ok();
}

core::Status checkBounded(std::string_view key, int64_t value, int64_t max) {
    if (value <= 0 || value > max) return core::invalidArgument("afd.{} must be in [1, {}], got {}", key, max, value);
    return core::Status::ok();
}

core::Status checkExtra(const AfdConfig& config) {
    const auto& extra = config.connector_extra_config;
    const std::array<std::pair<std::string_view, const std::optional<std::string>*>, 2> fields = {{
        {"bind_host", &extra.bind_host},
        {"advertise_host", &extra.advertise_host},
    }};
    for (const auto& [key, field] : fields) {
        if (!field->has_value()) continue;
        if (config.connector != ConnectorKind::kTcp) {
            return core::invalidArgument(
                "afd.connector_extra_config key '{}' is not accepted by connector '{}' "
                "(it accepts no keys)",
                key, connectorName(config.connector));
        }
        if ((*field)->empty()) {
            return core::invalidArgument("afd.connector_extra_config.{} must be a non-empty string", key);
        }
    }
    return core::Status::ok();
}

// Parses connector_extra_config for `connector`: unknown keys are rejected naming the connector and the key.
core::Result<ConnectorExtraConfig> parseExtra(const Json& value, ConnectorKind connector, std::string_view source,
                                              std::string_view key) {
    if (!value.is_object()) {
        return core::invalidArgument("{}: afd.{} must be an object, got {}", source, key, shown(value));
    }
    ConnectorExtraConfig extra;
    for (const auto& [name, item] : value.items()) {
        std::optional<std::string>* field = nullptr;
        if (connector == ConnectorKind::kTcp && name == "bind_host") field = &extra.bind_host;
        if (connector == ConnectorKind::kTcp && name == "advertise_host") field = &extra.advertise_host;
        if (field == nullptr) {
            if (connector == ConnectorKind::kTcp) {
                return core::invalidArgument("{}: unknown afd.{} key '{}' for connector 'tcp' (it accepts: {})", source,
                                             key, name, kTcpExtraKeys);
            }
            return core::invalidArgument("{}: afd.{} key '{}' is not accepted by connector '{}' (it accepts no keys)",
                                         source, key, name, connectorName(connector));
        }
        if (!item.is_string()) {
            return core::invalidArgument("{}: afd.{}.{} must be a string, got {}", source, key, name, shown(item));
        }
        *field = item.get<std::string>();
    }
    return extra;
}

// Parses the afd object (already a JSON object) into a config, without validate().
core::Result<AfdConfig> parseAfdObject(const Json& object, std::optional<Role> expected_role, std::string_view source) {
    // Resolve every key to its canonical name first: unknown keys and alias clashes are reported before values.
    std::vector<std::pair<const KeySpec*, std::string>> present;  // spec, key as written
    for (auto it = object.begin(); it != object.end(); ++it) {
        // NOTE: a named variable, not a structured binding: clang before 16 cannot capture bindings in a lambda.
        const std::string& name = it.key();
        const auto spec = std::find_if(kKeys.begin(), kKeys.end(), [&](const KeySpec& s) {
            return s.canonical == name || (!s.alias.empty() && s.alias == name);
        });
        if (spec == kKeys.end()) {
            return core::invalidArgument(
                "{}: unknown AFD config field '{}'; put connector-specific values under 'connector_extra_config'",
                source, name);
        }
        if (spec->alias == name && object.contains(std::string(spec->canonical))) {
            return core::invalidArgument(
                "{}: duplicate AFD config field for '{}': both alias '{}' and canonical key '{}' were provided", source,
                spec->canonical, spec->alias, spec->canonical);
        }
        present.emplace_back(&*spec, name);
    }

    AfdConfig config;
    bool role_given = false;
    const Json* extra_value = nullptr;
    std::string extra_key;
    for (const auto& [spec, key] : present) {
        const Json& value = object.at(key);
        const std::string_view name = spec->canonical;
        if (name == "role") {
            AFD_ASSIGN_OR_RETURN(std::string text, requireString(value, source, key));
            const auto role = parseRole(text);
            if (!role)
                return core::invalidArgument("{}: afd.{} must be 'attention' or 'ffn', got '{}'", source, key, text);
            config.role = *role;
            role_given = true;
        } else if (name == "connector") {
            AFD_ASSIGN_OR_RETURN(std::string text, requireString(value, source, key));
            const auto connector = parseConnector(text);
            if (!connector) {
                return core::invalidArgument("{}: afd.{} must be one of tcp, cuda_ipc, nccl, got '{}'", source, key,
                                             text);
            }
            config.connector = *connector;
        } else if (name == "host") {
            AFD_ASSIGN_OR_RETURN(config.host, requireString(value, source, key));
        } else if (name == "port") {
            AFD_ASSIGN_OR_RETURN(int64_t port, coerceInt(value, source, key));
            AFD_RETURN_IF_ERROR(checkPort(key, port).withContext(source));
            config.port = static_cast<int>(port);
        } else if (name == "num_attention_ranks" || name == "num_ffn_ranks") {
            AFD_ASSIGN_OR_RETURN(int64_t count, coerceInt(value, source, key));
            AFD_RETURN_IF_ERROR(checkCount(key, count).withContext(source));
            (name == "num_attention_ranks" ? config.num_attention_ranks : config.num_ffn_ranks) =
                static_cast<int>(count);
        } else if (name == "compute_gate_on_attention") {
            AFD_ASSIGN_OR_RETURN(config.compute_gate_on_attention, coerceBool(value, source, key));
        } else if (name == "max_num_tokens") {
            AFD_ASSIGN_OR_RETURN(config.max_num_tokens, coerceInt(value, source, key));
        } else if (name == "connect_timeout_s") {
            AFD_ASSIGN_OR_RETURN(config.connect_timeout_s, coerceInt(value, source, key));
        } else if (name == "step_timeout_s") {
            AFD_ASSIGN_OR_RETURN(config.step_timeout_s, coerceInt(value, source, key));
        } else {
            AFD_CHECK(name == "connector_extra_config", "AFD config key '{}' has no parser", name);
            extra_value = &value;
            extra_key = key;
        }
    }
    // The extra config is checked against the connector, which may come later in key order.
    if (extra_value != nullptr) {
        AFD_ASSIGN_OR_RETURN(config.connector_extra_config,
                             parseExtra(*extra_value, config.connector, source, extra_key));
    }
    if (!role_given && expected_role) config.role = *expected_role;
    return config;
}

core::Result<AfdConfig> parseAndValidate(const Json& object, std::optional<Role> expected_role,
                                         std::string_view source) {
    if (!object.is_object()) {
        return core::invalidArgument("{}: the afd value must be a JSON object, got {}", source, shown(object));
    }
    AFD_ASSIGN_OR_RETURN(AfdConfig config, parseAfdObject(object, expected_role, source));
    AFD_RETURN_IF_ERROR(config.validate(expected_role).withContext(source));
    return config;
}

// The {"afd": {...}} wrapper: an object whose only accepted key is "afd". std::nullopt when "afd" is absent.
core::Result<std::optional<AfdConfig>> parseWrapper(const Json& root, std::optional<Role> expected_role,
                                                    std::string_view source) {
    if (!root.is_object()) return core::invalidArgument("{}: must be a JSON object, got {}", source, shown(root));
    for (const auto& [name, item] : root.items()) {
        if (name != "afd")
            return core::invalidArgument("{}: unknown key '{}'; the only accepted key is 'afd'", source, name);
    }
    const auto afd = root.find("afd");
    if (afd == root.end()) return std::optional<AfdConfig>();
    AFD_ASSIGN_OR_RETURN(AfdConfig config, parseAndValidate(*afd, expected_role, source));
    return std::optional<AfdConfig>(std::move(config));
}

}  // namespace

std::string_view connectorName(ConnectorKind connector) {
    switch (connector) {
        case ConnectorKind::kTcp:
            return "tcp";
        case ConnectorKind::kCudaIpc:
            return "cuda_ipc";
        case ConnectorKind::kNccl:
            return "nccl";
    }
    AFD_FAIL("unknown ConnectorKind {}", static_cast<int>(connector));
}

std::optional<ConnectorKind> parseConnector(std::string_view name) {
    if (name == "tcp") return ConnectorKind::kTcp;
    if (name == "cuda_ipc") return ConnectorKind::kCudaIpc;
    if (name == "nccl") return ConnectorKind::kNccl;
    return std::nullopt;
}

core::Status AfdConfig::validate(std::optional<Role> expected_role) const {
    if (expected_role && role != *expected_role) {
        return core::invalidArgument("afd.role is '{}' but this subcommand runs the '{}' role", roleName(role),
                                     roleName(*expected_role));
    }
    // Positivity before the topology rule, so that a zero count is reported as such.
    AFD_RETURN_IF_ERROR(checkCount("num_attention_ranks", num_attention_ranks));
    AFD_RETURN_IF_ERROR(checkCount("num_ffn_ranks", num_ffn_ranks));
    const auto topology = Topology::create(num_attention_ranks, num_ffn_ranks, mode());
    if (!topology.isOk()) return topology.status();
    if (host.empty()) return core::invalidArgument("afd.host must be a non-empty string");
    AFD_RETURN_IF_ERROR(checkPort("port", port));
    AFD_RETURN_IF_ERROR(checkBounded("max_num_tokens", max_num_tokens, kMaxNumTokens));
    AFD_RETURN_IF_ERROR(checkBounded("connect_timeout_s", connect_timeout_s, kMaxTimeoutS));
    AFD_RETURN_IF_ERROR(checkBounded("step_timeout_s", step_timeout_s, kMaxTimeoutS));
    return checkExtra(*this);
}

Topology AfdConfig::topology() const {
    auto topology = Topology::create(num_attention_ranks, num_ffn_ranks, mode());
    AFD_CHECK(topology.isOk(), "topology() of an invalid AFD config: {}", topology.status().toString());
    return std::move(topology).value();
}

core::Result<AfdConfig> AfdConfig::fromJson(std::string_view text, std::optional<Role> expected_role,
                                            std::string_view source) {
    AFD_ASSIGN_OR_RETURN(Json object, parseJsonText(text, source));
    return parseAndValidate(object, expected_role, source);
}

std::string AfdConfig::toJson() const {
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (connector_extra_config.bind_host) extra["bind_host"] = *connector_extra_config.bind_host;
    if (connector_extra_config.advertise_host) extra["advertise_host"] = *connector_extra_config.advertise_host;
    nlohmann::ordered_json json;
    json["role"] = std::string(roleName(role));
    json["connector"] = std::string(connectorName(connector));
    json["host"] = host;
    json["port"] = port;
    json["num_attention_ranks"] = num_attention_ranks;
    json["num_ffn_ranks"] = num_ffn_ranks;
    json["compute_gate_on_attention"] = compute_gate_on_attention;
    json["max_num_tokens"] = max_num_tokens;
    json["connect_timeout_s"] = connect_timeout_s;
    json["step_timeout_s"] = step_timeout_s;
    json["connector_extra_config"] = std::move(extra);
    return json.dump();
}

std::string AfdConfig::fingerprint() const {
    return fmt::format("{}/{}/{}A{}F/t{}", connectorName(connector), modeName(mode()), num_attention_ranks,
                       num_ffn_ranks, max_num_tokens);
}

core::Result<std::optional<AfdConfig>> parseAdditionalConfig(std::string_view text, std::optional<Role> expected_role) {
    constexpr std::string_view kSource = "--additional-config";
    AFD_ASSIGN_OR_RETURN(Json root, parseJsonText(text, kSource));
    return parseWrapper(root, expected_role, kSource);
}

core::Result<AfdConfig> loadAfdConfigFile(const std::string& path, std::optional<Role> expected_role) {
    const std::string source = fmt::format("--afd-config file '{}'", path);
    auto file = core::MappedFile::open(path);
    if (!file.isOk()) return file.status().withContext(source);
    const auto& mapped = *file.value();
    if (mapped.size() > kMaxConfigFileBytes) {
        return core::invalidArgument("{}: larger than {} bytes ({} bytes)", source, kMaxConfigFileBytes, mapped.size());
    }
    const std::string_view text(reinterpret_cast<const char*>(mapped.data()), mapped.size());
    AFD_ASSIGN_OR_RETURN(Json root, parseJsonText(text, source));
    if (!root.is_object()) return core::invalidArgument("{}: must hold a JSON object, got {}", source, shown(root));
    if (!root.contains("afd")) return parseAndValidate(root, expected_role, source);
    AFD_ASSIGN_OR_RETURN(std::optional<AfdConfig> config, parseWrapper(root, expected_role, source));
    AFD_CHECK(config.has_value(), "{}: the afd key vanished", source);
    return std::move(*config);
}

core::Result<std::optional<AfdConfig>> resolveAfdConfig(const std::optional<std::string>& additional_config,
                                                        const std::optional<std::string>& afd_config_file,
                                                        std::optional<Role> expected_role) {
    if (additional_config && afd_config_file) {
        return core::invalidArgument("--additional-config and --afd-config were both given; use one of them");
    }
    if (additional_config) return parseAdditionalConfig(*additional_config, expected_role);
    if (afd_config_file) {
        AFD_ASSIGN_OR_RETURN(AfdConfig config, loadAfdConfigFile(*afd_config_file, expected_role));
        return std::optional<AfdConfig>(std::move(config));
    }
    return std::optional<AfdConfig>();
}

}  // namespace afd::transport
