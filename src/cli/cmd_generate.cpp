// `afd generate`: offline greedy/sampled generation on the CPU or a GPU (--device). Without an AFD config it is the
// dense reference (the whole model in this process); with one it runs as one attention rank of an AFD deployment,
// its MLP/MoE blocks on the FFN ranks over the TCP connector.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <iostream>

#include "attention/attention_rank.h"
#include "attention/engine.h"
#include "attention/offline.h"
#include "cli/attention_flags.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "core/exit_codes.h"
#include "core/logging.h"

namespace afd::cli {
namespace {

core::Result<std::vector<int32_t>> parseIds(const std::string& text) {
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = std::min(text.find(',', pos), text.size());
        const std::string_view item(text.data() + pos, comma - pos);
        int32_t value = 0;
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0) {
            return core::invalidArgument("--prompt-ids {:?}: {:?} is not a non-negative integer token id", text, item);
        }
        ids.push_back(value);
        pos = comma + 1;
    }
    return ids;
}

struct GenerateOptions {
    AttentionFlags rank;
    std::vector<std::string> prompt_ids;
    attention::SamplingParams sampling;
    bool json = false;
};

int fail(const core::Status& status) {
    AFD_LOG_ERROR("{}", status.message());
    return exitCodeFor(status);
}

void printResults(const std::vector<attention::GenerationResult>& results, bool json,
                  const std::vector<attention::MlpBackend::LayerTiming>& timings, bool afd) {
    if (!json) {
        for (const auto& r : results) std::cout << fmt::format("{}\n", fmt::join(r.new_ids, ","));
        return;
    }
    auto one = [](const attention::GenerationResult& r) {
        return nlohmann::json{{"prompt_ids", r.prompt_ids},
                              {"new_ids", r.new_ids},
                              {"finish_reason", attention::finishReasonName(r.finish_reason)},
                              {"prompt_last_logits", r.prompt_last_logits}};
    };
    nlohmann::json out;
    if (results.size() == 1) {
        out = one(results[0]);
    } else {
        out["results"] = nlohmann::json::array();
        for (const auto& r : results) out["results"].push_back(one(r));
    }
    if (afd) {
        nlohmann::json layers = nlohmann::json::array();
        for (size_t l = 0; l < timings.size(); ++l) {
            layers.push_back({{"layer", l},
                              {"transfer_seconds", timings[l].transfer_seconds},
                              {"compute_seconds", timings[l].compute_seconds}});
        }
        out["layer_timings"] = layers;
    }
    std::cout << out.dump() << "\n";
}

int runGenerate(const GenerateOptions& options) {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& text : options.prompt_ids) {
        auto ids = parseIds(text);
        if (!ids.isOk()) {
            AFD_LOG_ERROR("{}", ids.status().message());
            return core::kExitBadConfig;
        }
        prompts.push_back(std::move(ids).value());
    }
    if (prompts.empty() && !options.rank.afdGiven()) {
        AFD_LOG_ERROR("--prompt-ids is required (one per sequence)");
        return core::kExitBadConfig;
    }
    auto setup = resolveAttentionFlags(options.rank);
    if (!setup.isOk()) return fail(setup.status());
    auto rank = attention::AttentionRank::create(std::move(setup->source), std::move(setup->options));
    if (!rank.isOk()) return fail(rank.status());
    attention::AttentionRank& r = **rank;
    auto results = attention::generateOffline(r.engine(), prompts, options.sampling, options.json);
    const std::vector<attention::MlpBackend::LayerTiming> timings =
        r.isAfd() ? r.backend().layerTimings() : std::vector<attention::MlpBackend::LayerTiming>{};
    // generateOffline has finished the engine: this closes the connection to the FFN peers.
    (void)r.shutdown(std::chrono::seconds(10));
    if (!results.isOk()) return fail(results.status());
    printResults(*results, options.json, timings, r.isAfd());
    return core::kExitOk;
}

}  // namespace

void addGenerateCommand(CLI::App& app, int& exit_code) {
    auto options = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand("generate", "Offline generation (the dense reference without an AFD config)");
    addAttentionModelAndDeviceFlags(*cmd, options->rank, "--weights-seed");
    cmd->add_option("--prompt-ids", options->prompt_ids,
                    "comma-separated token ids; repeat for several prompts (an AFD attention rank may have none)")
        ->take_all();
    cmd->add_option("--max-tokens", options->sampling.max_tokens, "tokens to generate per prompt")->default_val(16);
    cmd->add_option("--temperature", options->sampling.temperature, "0 = greedy")->default_val(0.0f);
    cmd->add_option("--top-k", options->sampling.top_k, "0 = off")->default_val(0);
    cmd->add_option("--top-p", options->sampling.top_p, "1 = off")->default_val(1.0f);
    cmd->add_option("--seed", options->sampling.seed, "sampling seed")->default_val(0);
    cmd->add_flag("--ignore-eos", options->sampling.ignore_eos, "do not stop at end-of-sequence tokens");
    addEngineLimitFlags(*cmd, options->rank);
    cmd->add_flag("--json", options->json, "print one JSON object with new_ids and prompt_last_logits");
    addAfdFlags(*cmd, options->rank);
    cmd->callback([options, &exit_code] { exit_code = runGenerate(*options); });
}

}  // namespace afd::cli
