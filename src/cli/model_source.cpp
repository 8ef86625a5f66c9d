#include "cli/model_source.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>

#include "cli/model_loading.h"

namespace afd::cli {

void addModelFlags(CLI::App& cmd, ModelFlags& flags, const std::string& seed_flag) {
    cmd.add_option("--model", flags.model_dir,
                   "model directory: config.json + safetensors (with --random-weights, config.json is enough)");
    cmd.add_option("--config", flags.config_file, "a config.json to take the shapes from (needs --random-weights)");
    cmd.add_option("--preset", flags.preset,
                   "tiny, small or qwen3-30b-a3b, as gen-model takes (needs --random-weights)");
    cmd.add_option("--layers", flags.layers, "override num_hidden_layers (needs --random-weights)")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    CLI::Option* random =
        cmd.add_flag("--random-weights", flags.random_weights,
                     "no checkpoint: every weight drawn on the GPU (the values gen-model writes with the same seed)");
    cmd.add_option(seed_flag, flags.weights_seed, "seed of --random-weights (gen-model's --seed)")->needs(random);
}

core::Result<ModelSource> openModelSource(const ModelFlags& flags, const std::string& default_preset) {
    const int named = static_cast<int>(!flags.model_dir.empty()) + static_cast<int>(!flags.config_file.empty()) +
                      static_cast<int>(!flags.preset.empty());
    if (named > 1) return core::invalidArgument("give one of --model, --config or --preset, not several");
    if (named == 0 && default_preset.empty()) return core::invalidArgument("--model is required");
    if (!flags.random_weights) {
        if (!flags.config_file.empty() || !flags.preset.empty()) {
            return core::invalidArgument("--{} gives a shape without weights: add --random-weights",
                                         flags.config_file.empty() ? "preset" : "config");
        }
        if (flags.layers > 0) {
            return core::invalidArgument("--layers {} needs --random-weights (a checkpoint has its layers)",
                                         flags.layers);
        }
    }
    ModelSource source;
    source.random_weights = flags.random_weights;
    source.weights_seed = flags.weights_seed;
    if (!flags.model_dir.empty() && !flags.random_weights) {
        AFD_ASSIGN_OR_RETURN(OpenedModel opened, openModel(flags.model_dir));
        source.config = std::move(opened.config);
        source.checkpoint.emplace(std::move(opened.checkpoint));
        source.name = flags.model_dir;
        return source;
    }
    if (!flags.model_dir.empty()) {
        std::error_code ec;
        if (!std::filesystem::is_directory(flags.model_dir, ec)) {
            return core::invalidArgument("model directory {} does not exist or is not a directory", flags.model_dir);
        }
        const std::string path = (std::filesystem::path(flags.model_dir) / "config.json").string();
        AFD_ASSIGN_OR_RETURN(source.config, readModelConfig(path));
        source.name = flags.model_dir;
    } else if (!flags.config_file.empty()) {
        AFD_ASSIGN_OR_RETURN(source.config, readModelConfig(flags.config_file));
        source.name = flags.config_file;
    } else {
        const std::string& preset = flags.preset.empty() ? default_preset : flags.preset;
        AFD_ASSIGN_OR_RETURN(source.config, model::ModelConfig::preset(preset));
        source.name = "preset " + preset;
    }
    if (flags.layers > 0) {
        source.config.num_hidden_layers = flags.layers;
        std::erase_if(source.config.mlp_only_layers, [&](int64_t l) { return l >= flags.layers; });
        AFD_RETURN_IF_ERROR(
            source.config.validate().withContext(fmt::format("{} with --layers {}", source.name, flags.layers)));
    }
    return source;
}

}  // namespace afd::cli
