#include "cli/model_loading.h"

#include <filesystem>

namespace afd::cli {

core::Result<model::ModelConfig> readModelConfig(const std::string& path) {
    auto config = model::ModelConfig::fromFile(path);
    if (config.isOk() || config.status().code() == core::StatusCode::kInternal) return config;
    return core::invalidArgument("{}", config.status().message());
}

core::Result<OpenedModel> openModel(const std::string& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        return core::invalidArgument("model directory {} does not exist or is not a directory", dir);
    }
    AFD_ASSIGN_OR_RETURN(model::ModelConfig config,
                         readModelConfig((std::filesystem::path(dir) / "config.json").string()));
    AFD_ASSIGN_OR_RETURN(model::Checkpoint checkpoint, model::Checkpoint::open(dir));
    return OpenedModel{std::move(config), std::move(checkpoint)};
}

}  // namespace afd::cli
