#include "cli/serve_deployment.h"

#include "cli/ffn_fleet.h"
#include "transport/afd_config.h"

namespace afd::cli {

using nlohmann::json;

core::Result<ServeDeployment> resolveServeDeployment(const std::optional<std::string>& additional_config) {
    ServeDeployment d;
    if (!additional_config) return d;
    // The config's own parser first: it names the key and the rule before this function walks the JSON.
    AFD_ASSIGN_OR_RETURN(const auto checked, transport::parseAdditionalConfig(*additional_config, std::nullopt));
    if (!checked) return d;  // no "afd" object: the dense engine
    json root = json::parse(*additional_config, nullptr, false);
    if (root.is_discarded() || !root.is_object()) {
        return core::invalidArgument("--additional-config must be a JSON object");
    }
    json afd = root.at("afd");
    d.afd = true;
    const bool has_role = afd.contains("role") || afd.contains("afd_role");
    if (has_role) {
        if (checked->role != transport::Role::kAttention) {
            return core::invalidArgument(
                "--additional-config: afd serve runs an attention rank; an FFN rank is `afd ffn` (afd.role is {})",
                transport::roleName(checked->role));
        }
        d.attention_config = root.dump();
        return d;
    }
    AFD_RETURN_IF_ERROR(launchDefaults(afd));
    afd["role"] = "attention";
    AFD_ASSIGN_OR_RETURN(
        const transport::AfdConfig config,
        transport::AfdConfig::fromJson(afd.dump(), transport::Role::kAttention, "--additional-config"));
    if (config.num_attention_ranks != 1) {
        return core::invalidArgument(
            "--additional-config: afd.num_attention_ranks is {}, but afd serve without afd.role starts one attention "
            "rank (itself) and the FFN ranks: for more attention ranks, start the FFN ranks with `afd ffn` and one "
            "`afd serve --additional-config '{{\"afd\":{{\"role\":\"attention\",…}}}}' --attention-rank A` per rank",
            config.num_attention_ranks);
    }
    root["afd"] = afd;
    d.attention_config = root.dump();
    afd.erase("role");
    d.start_ffn_ranks = true;
    d.ffn_afd = afd;
    d.num_ffn_ranks = config.num_ffn_ranks;
    return d;
}

}  // namespace afd::cli
