// `afd gen-model`: writes a synthetic Qwen3-MoE checkpoint (HF layout) from a preset or a config.json.
#include <CLI/CLI.hpp>

#include <chrono>

#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "model/model_config.h"
#include "model/synthetic.h"

namespace afd::cli {

void addGenModelCommand(CLI::App& app, int& exit_code) {
    struct Options {
        std::string preset;
        std::string config_path;
        std::string out;
        int64_t layers = 0;
        uint64_t seed = 0;
        double max_shard_gb = 2.0;
    };
    auto options = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("gen-model", "Write a synthetic Qwen3-MoE checkpoint in the HF layout");
    auto* preset = cmd->add_option("--preset", options->preset, "tiny, small or qwen3-30b-a3b");
    auto* config = cmd->add_option("--config", options->config_path, "a config.json to take the shapes from");
    preset->excludes(config);
    cmd->add_option("--out", options->out, "output directory")->required();
    cmd->add_option("--layers", options->layers, "override num_hidden_layers")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    cmd->add_option("--seed", options->seed, "random seed (same seed, same weights)");
    cmd->add_option("--max-shard-gb", options->max_shard_gb, "largest shard in GB (HF-style sharding)")
        ->check(CLI::PositiveNumber);
    cmd->callback([options, &exit_code] {
        core::Result<model::ModelConfig> config = model::ModelConfig::preset("tiny");
        if (!options->config_path.empty()) {
            config = model::ModelConfig::fromFile(options->config_path);
        } else if (!options->preset.empty()) {
            config = model::ModelConfig::preset(options->preset);
        }
        if (!config.isOk()) {
            AFD_LOG_ERROR("{}", config.status().message());
            exit_code = core::kExitBadConfig;
            return;
        }
        if (options->layers > 0) {
            config->num_hidden_layers = options->layers;
            std::erase_if(config->mlp_only_layers, [&](int64_t l) { return l >= options->layers; });
        }
        model::SyntheticOptions synth;
        synth.seed = options->seed;
        synth.max_shard_bytes = static_cast<uint64_t>(options->max_shard_gb * 1e9);
        const auto start = std::chrono::steady_clock::now();
        const core::Status status = model::writeSyntheticCheckpoint(options->out, *config, synth);
        if (!status.isOk()) {
            AFD_LOG_ERROR("{}", status.message());
            exit_code = status.code() == core::StatusCode::kInvalidArgument ? core::kExitBadConfig : core::kExitFailure;
            return;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        AFD_LOG_INFO("wrote {} ({} layers, {} experts, hidden {}) in {:.1f} s", options->out, config->num_hidden_layers,
                     config->num_experts, config->hidden_size, seconds);
        exit_code = core::kExitOk;
    });
}

}  // namespace afd::cli
