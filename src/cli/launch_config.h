// The afd object `afd launch` gives its children: the user's --additional-config (checked by AfdConfig's parser
// first) with the launcher's defaults (launchDefaults, ffn_fleet.h: ranks, a free port) and the connector:
// "cuda_ipc" when every rank runs on a CUDA device and this build has that connector, unless the user named one
// (afd.connector or afd.afd_connector, kept as given: tcp stays possible); else the config's default (tcp). The role
// is implied per child, so giving one is an error (kInvalidArgument).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace afd::cli {

struct LaunchConnectorChoice {
    bool every_rank_on_cuda = false;  // launch_devices.h's everyRankOnCuda
    bool cuda_ipc_built = false;      // the connector factory has cuda_ipc
};

// The whole --additional-config object ({"afd": {...}} and nothing else) with the defaults filled in.
core::Result<nlohmann::json> launchAfdObject(const std::string& additional_config, const LaunchConnectorChoice& choice);

}  // namespace afd::cli
