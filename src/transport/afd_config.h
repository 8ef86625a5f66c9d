// AfdConfig: the AFD section of a process's configuration (role, connector, rendezvous address, topology,
// buffer sizes, timeouts). It arrives as JSON, either through `--additional-config '{"afd": {...}}'` or through
// `--afd-config FILE` (the same wrapper, or the bare afd object), never both.
//
// Keys of the afd object (aliases in brackets; an alias together with its canonical key is an error):
//   role [afd_role]              "attention" | "ffn"; absent → the subcommand's expected role, else attention
//   connector [afd_connector]    "tcp" | "cuda_ipc" | "nccl"                                   default tcp
//   host [afd_host]              rendezvous host (FFN rank 0 hosts the store), non-empty       default 127.0.0.1
//   port [afd_port]              rendezvous port, 0 < port < 65536                             default 1239
//   num_attention_ranks          >= 1                                                          default 1
//   num_ffn_ranks                >= 1                                                          default 1
//   compute_gate_on_attention    true = m2n (router on attention), false = p2p (needs A >= F)   default true
//   max_num_tokens               most tokens one attention rank sends in one stage (sizes receive buffers)
//                                                                                              default 8192
//   connect_timeout_s            bound on rendezvous and connection set-up                     default 120
//   step_timeout_s               bound on any wait inside a step                               default 60
//   connector_extra_config       object, checked against the connector: tcp takes `bind_host` and
//                                `advertise_host` (non-empty strings); cuda_ipc and nccl take no keys yet
// Values follow the JSON rules of core/json_fields.h, as config.json's do: a count is a JSON integer (not "2", not
// 2.0), compute_gate_on_attention is true or false (not 0 / 1, not "off"). A key repeated inside one object is an
// error. Every error names its source (flag or file), the key and the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "transport/role.h"
#include "transport/topology.h"

namespace afd::transport {

enum class ConnectorKind { kTcp, kCudaIpc, kNccl };

std::string_view connectorName(ConnectorKind connector);
std::optional<ConnectorKind> parseConnector(std::string_view name);

// connector_extra_config, after checking it against the connector. Unset values are std::nullopt.
struct ConnectorExtraConfig {
    // tcp: the address the data sockets listen on (default: the connector's choice).
    std::optional<std::string> bind_host;
    // tcp: the address peers are told to connect to (default: the connector's choice).
    std::optional<std::string> advertise_host;

    bool operator==(const ConnectorExtraConfig&) const = default;
};

struct AfdConfig {
    Role role = Role::kAttention;
    ConnectorKind connector = ConnectorKind::kTcp;
    std::string host = "127.0.0.1";
    int port = 1239;
    int num_attention_ranks = 1;
    int num_ffn_ranks = 1;
    bool compute_gate_on_attention = true;
    int64_t max_num_tokens = 8192;
    int64_t connect_timeout_s = 120;
    int64_t step_timeout_s = 60;
    ConnectorExtraConfig connector_extra_config;

    // Upper bounds that keep sizes derived from the config (buffers, tables, deadlines) sane.
    static constexpr int64_t kMaxNumTokens = int64_t{1} << 20;
    static constexpr int64_t kMaxTimeoutS = 7 * 24 * 3600;

    AfdMode mode() const { return compute_gate_on_attention ? AfdMode::kM2n : AfdMode::kP2p; }

    // Checks every rule that involves values only (not types): role against `expected_role` when given,
    // positive counts before the topology rule (p2p needs A >= F), host, port range, max_num_tokens, timeouts,
    // connector_extra_config against the connector. The first broken rule is returned (kInvalidArgument).
    core::Status validate(std::optional<Role> expected_role = std::nullopt) const;

    // The topology of these counts and this mode. Precondition: validate() passed (else AFD_CHECK fails).
    Topology topology() const;

    // Parses the afd object (JSON text of an object) and validates it. An absent `role` becomes
    // `expected_role` when given. `source` prefixes every error (e.g. "--additional-config", a file name).
    static core::Result<AfdConfig> fromJson(std::string_view text, std::optional<Role> expected_role,
                                            std::string_view source);

    // The effective config as the afd object, canonical keys only, every field present (connector_extra_config
    // holds the set values). fromJson(toJson()) gives back an equal config.
    std::string toJson() const;

    // A short, stable, human-readable string of the fields every rank must agree on: connector, mode, counts,
    // max_num_tokens (e.g. "tcp/m2n/2A1F/t8192"). Role, host, port and timeouts are not in it.
    std::string fingerprint() const;

    bool operator==(const AfdConfig&) const = default;
};

// `--additional-config` text: a JSON object whose only accepted key is "afd". Returns std::nullopt when the
// object has no "afd" key (AFD is off), else the parsed and validated config.
core::Result<std::optional<AfdConfig>> parseAdditionalConfig(std::string_view text, std::optional<Role> expected_role);

// `--afd-config FILE`: the file holds {"afd": {...}} (the same rules as --additional-config, and "afd" must be
// present) or the bare afd object. Errors name the file.
core::Result<AfdConfig> loadAfdConfigFile(const std::string& path, std::optional<Role> expected_role);

// Both flags as a subcommand sees them (std::nullopt = flag not given). Giving both is an error. Returns
// std::nullopt when neither yields an AFD config.
core::Result<std::optional<AfdConfig>> resolveAfdConfig(const std::optional<std::string>& additional_config,
                                                        const std::optional<std::string>& afd_config_file,
                                                        std::optional<Role> expected_role);

}  // namespace afd::transport
