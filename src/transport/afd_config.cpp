#include "transport/afd_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "core/check.h"
#include "core/json_fields.h"
#include "core/mapped_file.h"

namespace afd::transport {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;
// Objects and arrays nest at most this deep (an AFD config nests three levels). Deeper documents are refused
// right after parsing, before anything walks them recursively: an error message dumps a value, recursing once per
// level.
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

constexpr int64_t kMinPort = 1;
constexpr int64_t kMaxPort = 65535;

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

// Parses connector_extra_config (named `path` in messages) for `connector`: unknown keys are rejected naming the
// connector and the key.
core::Result<ConnectorExtraConfig> parseExtra(const Json& value, ConnectorKind connector, std::string path) {
    AFD_ASSIGN_OR_RETURN(const core::JsonObjectReader extra_object, core::JsonObjectReader::of(value, std::move(path)));
    ConnectorExtraConfig extra;
    for (const auto& [name, item] : value.items()) {
        std::optional<std::string>* field = nullptr;
        if (connector == ConnectorKind::kTcp && name == "bind_host") field = &extra.bind_host;
        if (connector == ConnectorKind::kTcp && name == "advertise_host") field = &extra.advertise_host;
        if (field == nullptr) {
            if (connector == ConnectorKind::kTcp) {
                return core::invalidArgument("unknown {} key '{}' for connector 'tcp' (it accepts: {})",
                                             extra_object.path(), name, kTcpExtraKeys);
            }
            return core::invalidArgument("{} key '{}' is not accepted by connector '{}' (it accepts no keys)",
                                         extra_object.path(), name, connectorName(connector));
        }
        AFD_ASSIGN_OR_RETURN(*field, core::jsonAs<std::string>(item, extra_object.name(name)));
    }
    return extra;
}

// Parses the afd object (already a JSON object) into a config, without validate(). Messages name no source; a key
// is named as written ("afd.afd_port" for the alias).
core::Result<AfdConfig> parseAfdObject(const Json& object, std::optional<Role> expected_role) {
    const core::JsonObjectReader afd(object, "afd");
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
                "unknown AFD config field '{}'; put connector-specific values under 'connector_extra_config'", name);
        }
        if (spec->alias == name && object.contains(std::string(spec->canonical))) {
            return core::invalidArgument(
                "duplicate AFD config field for '{}': both alias '{}' and canonical key '{}' were provided",
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
        const std::string_view canonical = spec->canonical;
        const std::string name = afd.name(key);
        if (canonical == "role") {
            AFD_ASSIGN_OR_RETURN(const std::string text, core::jsonAs<std::string>(value, name));
            const auto role = parseRole(text);
            if (!role) return core::invalidArgument("{} must be 'attention' or 'ffn', got '{}'", name, text);
            config.role = *role;
            role_given = true;
        } else if (canonical == "connector") {
            AFD_ASSIGN_OR_RETURN(const std::string text, core::jsonAs<std::string>(value, name));
            const auto connector = parseConnector(text);
            if (!connector) return core::invalidArgument("{} must be one of tcp, cuda_ipc, nccl, got '{}'", name, text);
            config.connector = *connector;
        } else if (canonical == "host") {
            AFD_ASSIGN_OR_RETURN(config.host, core::jsonAs<std::string>(value, name));
        } else if (canonical == "port") {
            // The ranges are checked before narrowing to int.
            AFD_ASSIGN_OR_RETURN(const int64_t port, core::jsonIntIn(value, name, kMinPort, kMaxPort));
            config.port = static_cast<int>(port);
        } else if (canonical == "num_attention_ranks" || canonical == "num_ffn_ranks") {
            AFD_ASSIGN_OR_RETURN(const int64_t count, core::jsonIntIn(value, name, 1, Topology::kMaxRanks));
            (canonical == "num_attention_ranks" ? config.num_attention_ranks : config.num_ffn_ranks) =
                static_cast<int>(count);
        } else if (canonical == "compute_gate_on_attention") {
            AFD_ASSIGN_OR_RETURN(config.compute_gate_on_attention, core::jsonAs<bool>(value, name));
        } else if (canonical == "max_num_tokens") {
            AFD_ASSIGN_OR_RETURN(config.max_num_tokens, core::jsonAs<int64_t>(value, name));
        } else if (canonical == "connect_timeout_s") {
            AFD_ASSIGN_OR_RETURN(config.connect_timeout_s, core::jsonAs<int64_t>(value, name));
        } else if (canonical == "step_timeout_s") {
            AFD_ASSIGN_OR_RETURN(config.step_timeout_s, core::jsonAs<int64_t>(value, name));
        } else {
            AFD_CHECK(canonical == "connector_extra_config", "AFD config key '{}' has no parser", canonical);
            extra_value = &value;
            extra_key = key;
        }
    }
    // The extra config is checked against the connector, which may come later in key order.
    if (extra_value != nullptr) {
        AFD_ASSIGN_OR_RETURN(config.connector_extra_config,
                             parseExtra(*extra_value, config.connector, afd.name(extra_key)));
    }
    if (!role_given && expected_role) config.role = *expected_role;
    return config;
}

core::Result<AfdConfig> parseAndValidate(const Json& object, std::optional<Role> expected_role,
                                         std::string_view source) {
    if (!object.is_object()) return core::jsonTypeError(object, "the afd value", "a JSON object").withContext(source);
    core::Result<AfdConfig> config = parseAfdObject(object, expected_role);
    if (!config.isOk()) return config.status().withContext(source);
    AFD_RETURN_IF_ERROR(config->validate(expected_role).withContext(source));
    return config;
}

// The {"afd": {...}} wrapper: an object whose only accepted key is "afd". std::nullopt when "afd" is absent.
core::Result<std::optional<AfdConfig>> parseWrapper(const Json& root, std::optional<Role> expected_role,
                                                    std::string_view source) {
    if (!root.is_object()) {
        return core::invalidArgument("{}: must be a JSON object, got {}", source, core::jsonShown(root));
    }
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
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.num_attention_ranks", num_attention_ranks, 1, Topology::kMaxRanks));
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.num_ffn_ranks", num_ffn_ranks, 1, Topology::kMaxRanks));
    const auto topology = Topology::create(num_attention_ranks, num_ffn_ranks, mode());
    if (!topology.isOk()) return topology.status();
    if (host.empty()) return core::invalidArgument("afd.host must be a non-empty string");
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.port", port, kMinPort, kMaxPort));
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.max_num_tokens", max_num_tokens, 1, kMaxNumTokens));
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.connect_timeout_s", connect_timeout_s, 1, kMaxTimeoutS));
    AFD_RETURN_IF_ERROR(core::checkInRange("afd.step_timeout_s", step_timeout_s, 1, kMaxTimeoutS));
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
    if (!root.is_object()) {
        return core::invalidArgument("{}: must hold a JSON object, got {}", source, core::jsonShown(root));
    }
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
