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
    bool prompt_logits = false;
};

int fail(const core::Status& status) {
    AFD_LOG_ERROR("{}", status.message());
    return exitCodeFor(status);
}

// The JSON schema (README): {"results": [{"prompt_ids", "new_ids", "finish_reason"[, "prompt_last_logits"]}, …],
// "layer_timings" (AFD only), "error" (only when the run failed: the results are then what each prompt had)}.
// Text: one line of comma-separated new ids per prompt.
void printResults(const attention::OfflineGeneration& run, const GenerateOptions& options,
                  const std::vector<attention::MlpBackend::LayerTiming>& timings, bool afd) {
    if (!options.json) {
        for (const auto& r : run.results) std::cout << fmt::format("{}\n", fmt::join(r.new_ids, ","));
        return;
    }
    nlohmann::json out;
    out["results"] = nlohmann::json::array();
    for (const auto& r : run.results) {
        nlohmann::json one = {{"prompt_ids", r.prompt_ids},
                              {"new_ids", r.new_ids},
                              {"finish_reason", attention::finishReasonName(r.finish_reason)}};
        if (options.prompt_logits) one["prompt_last_logits"] = r.prompt_last_logits;
        out["results"].push_back(std::move(one));
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
    if (!run.isOk()) out["error"] = run.status.message();
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
    const attention::OfflineGeneration run =
        attention::generateOffline(r.engine(), prompts, options.sampling, options.prompt_logits);
    const std::vector<attention::MlpBackend::LayerTiming> timings =
        r.isAfd() ? r.backend().layerTimings() : std::vector<attention::MlpBackend::LayerTiming>{};
    // generateOffline has finished the engine: this closes the connection to the FFN peers.
    (void)r.shutdown(std::chrono::seconds(10));
    // A run that failed part-way still prints what each prompt had (finish_reason "error").
    if (!run.results.empty()) printResults(run, options, timings, r.isAfd());
    if (!run.isOk()) return fail(run.status);
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
    cmd->add_flag("--json", options->json,
                  "print one JSON object: {\"results\": [{prompt_ids, new_ids, finish_reason}, …]}");
    cmd->add_flag("--prompt-logits", options->prompt_logits,
                  "with --json: each result's prompt_last_logits too (the full vocabulary's logits)");
    addAfdFlags(*cmd, options->rank);
    cmd->callback([options, &exit_code] { exit_code = runGenerate(*options); });
}

}  // namespace afd::cli
