#include "cli/model_loading.h"

#include <filesystem>

#include "core/exit_codes.h"

namespace afd::cli {

core::Result<OpenedModel> openModel(const std::string& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        return core::notFound("model directory {} does not exist or is not a directory", dir);
    }
    const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
    AFD_ASSIGN_OR_RETURN(model::ModelConfig config, model::ModelConfig::fromFile(config_path));
    AFD_ASSIGN_OR_RETURN(model::Checkpoint checkpoint, model::Checkpoint::open(dir));
    return OpenedModel{std::move(config), std::move(checkpoint)};
}

int exitCodeFor(const core::Status& status) {
    switch (status.code()) {
        case core::StatusCode::kInvalidArgument:
        case core::StatusCode::kUnsupported:
            return core::kExitBadConfig;
        case core::StatusCode::kPeerLost:
        case core::StatusCode::kTimeout:
            return core::kExitPeerLost;
        case core::StatusCode::kInternal:
            return core::kExitInternal;
        default:
            return core::kExitFailure;
    }
}

}  // namespace afd::cli
