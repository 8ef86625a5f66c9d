// `afd generate`: offline greedy/sampled generation. Without an AFD config it is the dense reference (the whole
// model in this process); with one it runs as one attention rank of an AFD deployment.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <charconv>
#include <iostream>

#include "attention/engine.h"
#include "attention/local_mlp_backend.h"
#include "attention/offline.h"
#include "attention/remote_mlp_backend.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "model/fingerprint.h"
#include "model/weights.h"
#include "transport/afd_config.h"
#include "transport/afd_wire.h"
#include "transport/tcp/tcp_connector.h"

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
    std::string model;
    std::optional<int64_t> max_num_batched_tokens;
    std::optional<std::string> additional_config;
    std::optional<std::string> afd_config_file;
    int attention_rank = 0;
    std::vector<std::string> prompt_ids;
    attention::SamplingParams sampling;
    attention::EngineOptions engine;
    bool json = false;
};

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

// One attention rank of an AFD deployment: the MLP/MoE blocks go to the FFN ranks through the connector.
int runAttentionRank(const GenerateOptions& options, const transport::AfdConfig& afd, const OpenedModel& opened,
                     const attention::EngineOptions& engine_options_in,
                     const std::vector<std::vector<int32_t>>& prompts) {
    const model::ModelConfig& config = opened.config;
    if (options.attention_rank < 0 || options.attention_rank >= afd.num_attention_ranks) {
        AFD_LOG_ERROR("--attention-rank {} must be in [0, afd.num_attention_ranks={})", options.attention_rank,
                      afd.num_attention_ranks);
        return core::kExitBadConfig;
    }
    if (afd.connector != transport::ConnectorKind::kTcp) {
        AFD_LOG_ERROR("afd.connector {:?}: offline generation runs over the tcp connector",
                      transport::connectorName(afd.connector));
        return core::kExitBadConfig;
    }
    attention::EngineOptions engine_options = engine_options_in;
    if (!options.max_num_batched_tokens) {
        engine_options.scheduler.max_num_batched_tokens = std::min<int64_t>(2048, afd.max_num_tokens);
    }
    if (engine_options.scheduler.max_num_batched_tokens > afd.max_num_tokens) {
        AFD_LOG_ERROR("--max-num-batched-tokens {} exceeds afd.max_num_tokens {} (the most tokens a frame may carry)",
                      engine_options.scheduler.max_num_batched_tokens, afd.max_num_tokens);
        return core::kExitBadConfig;
    }
    if (afd.compute_gate_on_attention && config.numMoeLayers() == 0) {
        AFD_LOG_ERROR("m2n (compute_gate_on_attention) needs MoE layers; {} has none", options.model);
        return core::kExitBadConfig;
    }
    if (afd.compute_gate_on_attention && config.num_experts < afd.num_ffn_ranks) {
        AFD_LOG_ERROR("afd.num_ffn_ranks {} exceeds the model's {} experts", afd.num_ffn_ranks, config.num_experts);
        return core::kExitBadConfig;
    }
    core::setLogTag(fmt::format("attention:{}", options.attention_rank));
    const transport::Topology topology = afd.topology();
    auto weights = model::loadWeights(opened.checkpoint, config,
                                      model::WeightSelection::attentionRole(afd.compute_gate_on_attention));
    if (!weights.isOk()) {
        AFD_LOG_ERROR("{}", weights.status().message());
        return exitCodeFor(weights.status());
    }
    auto model_fp = model::modelFingerprint(config, opened.checkpoint);
    if (!model_fp.isOk()) {
        AFD_LOG_ERROR("{}", model_fp.status().message());
        return exitCodeFor(model_fp.status());
    }
    transport::tcp::TcpConnectorOptions tcp;
    tcp.role = transport::Role::kAttention;
    tcp.rank = options.attention_rank;
    tcp.num_attention_ranks = afd.num_attention_ranks;
    tcp.num_ffn_ranks = afd.num_ffn_ranks;
    tcp.peers = topology.ffnPeersOfAttention(options.attention_rank);
    tcp.store_host = afd.host;
    tcp.store_port = afd.port;
    tcp.fingerprint = *model_fp + " | " + afd.fingerprint();
    tcp.rendezvous_timeout = std::chrono::seconds(afd.connect_timeout_s);
    tcp.step_timeout = std::chrono::seconds(afd.step_timeout_s);
    tcp.max_rows = static_cast<uint32_t>(afd.max_num_tokens);
    // The limit covers frames both ways (the connector checks what it sends against what the peer accepts): the
    // m2n dispatch rows carry ids and weights besides the hidden state.
    const size_t row_bytes = afd.compute_gate_on_attention
                                 ? transport::m2nDispatchSpec(config.hidden_size, config.num_experts_per_tok).rowBytes()
                                 : transport::hiddenSpec(config.hidden_size).rowBytes();
    tcp.max_frame_bytes = row_bytes * static_cast<size_t>(afd.max_num_tokens);
    auto connector = transport::tcp::createAttentionConnector(tcp);
    if (!connector.isOk()) {
        AFD_LOG_ERROR("{}", connector.status().message());
        return exitCodeFor(connector.status());
    }
    attention::RemoteMlpBackend backend(config, *weights, afd.mode(), topology, **connector);
    auto engine = attention::Engine::create(config, *weights, backend, engine_options);
    if (!engine.isOk()) {
        AFD_LOG_ERROR("{}", engine.status().message());
        (*connector)->close();
        return exitCodeFor(engine.status());
    }
    auto results = attention::generateOffline(**engine, prompts, options.sampling, options.json);
    (*connector)->close();
    if (!results.isOk()) {
        AFD_LOG_ERROR("{}", results.status().message());
        return exitCodeFor(results.status());
    }
    printResults(*results, options.json, backend.layerTimings(), true);
    return core::kExitOk;
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
    if (prompts.empty() && !options.additional_config && !options.afd_config_file) {
        AFD_LOG_ERROR("--prompt-ids is required (one per sequence)");
        return core::kExitBadConfig;
    }
    auto opened = openModel(options.model);
    if (!opened.isOk()) {
        AFD_LOG_ERROR("{}", opened.status().message());
        return exitCodeFor(opened.status());
    }
    const model::ModelConfig& config = opened->config;
    attention::EngineOptions engine_options = options.engine;
    if (engine_options.scheduler.max_model_len <= 0) {
        engine_options.scheduler.max_model_len = std::min<int64_t>(config.max_position_embeddings, 8192);
    }
    engine_options.scheduler.max_num_batched_tokens = options.max_num_batched_tokens.value_or(2048);
    if (auto status = engine_options.validate(); !status.isOk()) {
        AFD_LOG_ERROR("{}", status.message());
        return core::kExitBadConfig;
    }
    auto afd =
        transport::resolveAfdConfig(options.additional_config, options.afd_config_file, transport::Role::kAttention);
    if (!afd.isOk()) {
        AFD_LOG_ERROR("{}", afd.status().message());
        return core::kExitBadConfig;
    }
    if (!*afd) {
        auto weights = model::loadWeights(opened->checkpoint, config, model::WeightSelection::everything(config));
        if (!weights.isOk()) {
            AFD_LOG_ERROR("{}", weights.status().message());
            return exitCodeFor(weights.status());
        }
        attention::LocalMlpBackend backend(config, *weights);
        auto engine = attention::Engine::create(config, *weights, backend, engine_options);
        if (!engine.isOk()) {
            AFD_LOG_ERROR("{}", engine.status().message());
            return exitCodeFor(engine.status());
        }
        auto results = attention::generateOffline(**engine, prompts, options.sampling, options.json);
        if (!results.isOk()) {
            AFD_LOG_ERROR("{}", results.status().message());
            return exitCodeFor(results.status());
        }
        printResults(*results, options.json, {}, false);
        return core::kExitOk;
    }
    return runAttentionRank(options, **afd, *opened, engine_options, prompts);
}

}  // namespace

void addGenerateCommand(CLI::App& app, int& exit_code) {
    auto options = std::make_shared<GenerateOptions>();
    options->engine.scheduler.max_model_len = 0;  // default: from the model config
    CLI::App* cmd = app.add_subcommand("generate", "Offline generation (the dense reference without an AFD config)");
    cmd->add_option("--model", options->model, "model directory (config.json + safetensors)")->required();
    cmd->add_option("--prompt-ids", options->prompt_ids,
                    "comma-separated token ids; repeat for several prompts (an AFD attention rank may have none)")
        ->take_all();
    cmd->add_option("--max-tokens", options->sampling.max_tokens, "tokens to generate per prompt")->default_val(16);
    cmd->add_option("--temperature", options->sampling.temperature, "0 = greedy")->default_val(0.0f);
    cmd->add_option("--top-k", options->sampling.top_k, "0 = off")->default_val(0);
    cmd->add_option("--top-p", options->sampling.top_p, "1 = off")->default_val(1.0f);
    cmd->add_option("--seed", options->sampling.seed, "sampling seed")->default_val(0);
    cmd->add_flag("--ignore-eos", options->sampling.ignore_eos, "do not stop at end-of-sequence tokens");
    cmd->add_option("--max-num-seqs", options->engine.scheduler.max_num_seqs, "sequences per step")->default_val(64);
    cmd->add_option("--max-num-batched-tokens", options->max_num_batched_tokens,
                    "tokens per step, prefill chunked to fit (default 2048, at most afd.max_num_tokens under AFD)");
    cmd->add_option("--max-model-len", options->engine.scheduler.max_model_len,
                    "longest prompt + output (default: min(max_position_embeddings, 8192))");
    cmd->add_option("--block-size", options->engine.block_size, "KV cache block size in tokens")->default_val(16);
    cmd->add_option("--num-kv-blocks", options->engine.num_kv_blocks,
                    "KV cache blocks (0 = enough for max-num-seqs full-length sequences within --kv-cache-mb)")
        ->default_val(0);
    cmd->add_option_function<uint64_t>(
           "--kv-cache-mb", [options](uint64_t mb) { options->engine.kv_cache_bytes = mb << 20; },
           "KV cache budget in MiB when --num-kv-blocks is 0 (default 1024)")
        ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
    cmd->add_flag("--dbo", options->engine.dual_batch_overlap, "split each step into two stages");
    cmd->add_flag("--json", options->json, "print one JSON object with new_ids and prompt_last_logits");
    cmd->add_option("--additional-config", options->additional_config,
                    "JSON with an \"afd\" object: run as one attention rank of an AFD deployment");
    cmd->add_option("--afd-config", options->afd_config_file, "a file holding the AFD config (instead of the flag)");
    cmd->add_option("--attention-rank", options->attention_rank, "this process's attention rank (AFD)")->default_val(0);
    cmd->callback([options, &exit_code] { exit_code = runGenerate(*options); });
}

}  // namespace afd::cli
