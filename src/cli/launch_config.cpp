#include "cli/launch_config.h"

#include "cli/ffn_fleet.h"
#include "transport/afd_config.h"

namespace afd::cli {

using nlohmann::json;

core::Result<json> launchAfdObject(const std::string& additional_config, const LaunchConnectorChoice& choice) {
    json root = json::object();
    if (!additional_config.empty()) {
        // The config's own parser first: it names the key and the rule, and refuses what is not safe to walk
        // (e.g. nesting deeper than it allows) before this function copies or prints anything of it.
        auto checked = transport::parseAdditionalConfig(additional_config, transport::Role::kAttention);
        if (!checked.isOk()) return checked.status();
        root = json::parse(additional_config, nullptr, false);
        if (root.is_discarded() || !root.is_object())
            return core::invalidArgument("--additional-config must be a JSON object");
    }
    if (!root.contains("afd")) root["afd"] = json::object();
    json& afd = root["afd"];
    if (!afd.is_object()) return core::invalidArgument("--additional-config: \"afd\" must be an object");
    for (const char* key : {"role", "afd_role"}) {
        if (afd.contains(key))
            return core::invalidArgument("--additional-config: afd.{} is implied by afd launch (it starts both roles)",
                                         key);
    }
    AFD_RETURN_IF_ERROR(launchDefaults(afd));
    const bool connector_given = afd.contains("connector") || afd.contains("afd_connector");
    if (!connector_given && choice.every_rank_on_cuda && choice.cuda_ipc_built) {
        afd["connector"] = std::string(transport::connectorName(transport::ConnectorKind::kCudaIpc));
    }
    return root;
}

}  // namespace afd::cli
