// `afd generate`: offline greedy/sampled generation on the CPU or a GPU (--device). Without an AFD config it is the
// dense reference (the whole model in this process); with one it runs as one attention rank of an AFD deployment,
// its MLP/MoE blocks on the FFN ranks over the TCP connector.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <charconv>
#include <iostream>

#include "attention/device_ops_factory.h"
#include "attention/engine.h"
#include "attention/offline.h"
#include "attention/remote_mlp_backend.h"
#include "cli/commands.h"
#include "cli/device_flags.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "cli/model_source.h"
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
    ModelFlags model;
    DeviceChoice device;
    std::string dtype = "auto";
    double gpu_memory_utilization = 0.9;
    bool kv_cache_mb_given = false;
    std::optional<int64_t> max_num_batched_tokens;
    std::optional<std::string> additional_config;
    std::optional<std::string> afd_config_file;
    int attention_rank = 0;
    std::vector<std::string> prompt_ids;
    attention::SamplingParams sampling;
    attention::EngineOptions engine;
    bool json = false;

    bool kvGiven() const { return kv_cache_mb_given || engine.num_kv_blocks > 0; }
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

// One attention rank of an AFD deployment on `device`: the MLP/MoE blocks go to the FFN ranks through the TCP
// connector (the m2n router and dense MLP layers run here, on the device, from the rank's weights there).
int runAttentionRank(const GenerateOptions& options, const transport::AfdConfig& afd, const ModelSource& source,
                     core::Device device, const attention::EngineOptions& engine_options_in,
                     const std::vector<std::vector<int32_t>>& prompts) {
    const model::ModelConfig& config = source.config;
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
        AFD_LOG_ERROR("m2n (compute_gate_on_attention) needs MoE layers; {} has none", source.name);
        return core::kExitBadConfig;
    }
    if (afd.compute_gate_on_attention && config.num_experts < afd.num_ffn_ranks) {
        AFD_LOG_ERROR("afd.num_ffn_ranks {} exceeds the model's {} experts", afd.num_ffn_ranks, config.num_experts);
        return core::kExitBadConfig;
    }
    core::setLogTag(fmt::format("attention:{}", options.attention_rank));
    const transport::Topology topology = afd.topology();
    const model::WeightSelection selection = model::WeightSelection::attentionRole(afd.compute_gate_on_attention);
    auto model_fp = model::modelFingerprint(config, *source.checkpoint);
    if (!model_fp.isOk()) return fail(model_fp.status());
    auto ops = attention::createDeviceOps(device);
    if (!ops.isOk()) return fail(ops.status());
    const bool gpu = !device.isCpu();
    const uint64_t beside =
        gpu ? engineWorkspaceBytes(config, engine_options) + minimumKvBytes(config, engine_options, options.kvGiven())
            : 0;
    auto weights = weightsForDevice(source, selection, device, beside);
    if (!weights.isOk()) return fail(weights.status());
    if (gpu && !options.kvGiven()) {
        if (auto s = sizeGpuKvCache(config, device.index, options.gpu_memory_utilization, engine_options); !s.isOk()) {
            return fail(s);
        }
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
    if (!connector.isOk()) return fail(connector.status());
    attention::RemoteMlpBackend backend(config, *weights, afd.mode(), topology, **connector, **ops);
    auto engine = attention::Engine::create(config, *weights, **ops, backend, engine_options);
    if (!engine.isOk()) {
        (*connector)->close();
        return fail(engine.status());
    }
    auto results = attention::generateOffline(**engine, prompts, options.sampling, options.json);
    (*connector)->close();
    if (!results.isOk()) return fail(results.status());
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
    auto afd =
        transport::resolveAfdConfig(options.additional_config, options.afd_config_file, transport::Role::kAttention);
    if (!afd.isOk()) {
        AFD_LOG_ERROR("{}", afd.status().message());
        return core::kExitBadConfig;
    }
    if (*afd && (options.attention_rank < 0 || options.attention_rank >= (*afd)->num_attention_ranks)) {
        AFD_LOG_ERROR("--attention-rank {} must be in [0, afd.num_attention_ranks={})", options.attention_rank,
                      (*afd)->num_attention_ranks);
        return core::kExitBadConfig;
    }
    if (*afd && options.model.random_weights) {
        AFD_LOG_ERROR(
            "--random-weights runs the dense engine only: the FFN ranks of an AFD deployment load their experts from a "
            "checkpoint (write one with `afd gen-model`)");
        return core::kExitBadConfig;
    }
    // The device before the model: a GPU that is not there is reported before anything is read.
    const int rank = *afd ? options.attention_rank : 0;
    auto device =
        resolveDevice(options.device, rank, *afd ? fmt::format("attention rank {}", rank) : "the dense engine");
    if (!device.isOk()) return fail(device.status());
    auto source = openModelSource(options.model);
    if (!source.isOk()) return fail(source.status());
    if (auto s = checkWeightsDevice(*source, *device); !s.isOk()) return fail(s);
    const model::ModelConfig& config = source->config;
    attention::EngineOptions engine_options = options.engine;
    if (engine_options.scheduler.max_model_len <= 0) {
        engine_options.scheduler.max_model_len = std::min<int64_t>(config.max_position_embeddings, 8192);
    }
    engine_options.scheduler.max_num_batched_tokens = options.max_num_batched_tokens.value_or(2048);
    if (auto status = engine_options.validate(); !status.isOk()) {
        AFD_LOG_ERROR("{}", status.message());
        return core::kExitBadConfig;
    }
    if (*afd) return runAttentionRank(options, **afd, *source, *device, engine_options, prompts);

    DenseEngineOptions dense;
    dense.device = *device;
    if (options.dtype == "float32" && !device->isCpu()) {
        AFD_LOG_ERROR("--dtype float32: {} computes in bfloat16 (float32 activations run on the CPU)",
                      device->toString());
        return core::kExitBadConfig;
    }
    dense.cpu_precision =
        options.dtype == "bfloat16" ? attention::CpuPrecision::kBf16Activations : attention::CpuPrecision::kFp32;
    dense.engine = engine_options;
    dense.gpu.gpu_memory_utilization = options.gpu_memory_utilization;
    dense.gpu.kv_given = options.kvGiven();
    auto engine = DenseEngine::create(std::move(source).value(), dense);
    if (!engine.isOk()) return fail(engine.status());
    auto results = attention::generateOffline((*engine)->engine(), prompts, options.sampling, options.json);
    if (!results.isOk()) return fail(results.status());
    printResults(*results, options.json, {}, false);
    return core::kExitOk;
}

}  // namespace

void addGenerateCommand(CLI::App& app, int& exit_code) {
    auto options = std::make_shared<GenerateOptions>();
    options->engine.scheduler.max_model_len = 0;  // default: from the model config
    CLI::App* cmd = app.add_subcommand("generate", "Offline generation (the dense reference without an AFD config)");
    addModelFlags(*cmd, options->model, "--weights-seed");
    cmd->add_option("--device", options->device.device, "cpu or cuda (the GPU of --device-ids)")
        ->default_val("cpu")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--device-ids", options->device.device_ids,
                    "GPUs indexed by the attention rank, as afd ffn's (default: the rank's own index; 0 without AFD)");
    cmd->add_option("--dtype", options->dtype,
                    "activation precision of the dense engine: auto (float32 on the CPU, bfloat16 on a GPU), float32, "
                    "or bfloat16 (on the CPU: rounded to bf16 where the GPU engine stores bf16, a reference at its "
                    "precision)")
        ->default_val("auto")
        ->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
    cmd->add_flag("--enforce-eager", options->engine.enforce_eager, "no CUDA graphs: every decode step runs eagerly");
    cmd->add_option("--cuda-graph-max-batch-size", options->engine.cuda_graph_max_batch_size,
                    "decode steps of more sequences run eagerly (0: up to --max-num-seqs)")
        ->default_val(0)
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--gpu-memory-utilization", options->gpu_memory_utilization,
                    "cuda: the fraction of the GPU's memory for weights, KV cache and workspaces; the KV cache gets "
                    "what is left (unless --kv-cache-mb or --num-kv-blocks)")
        ->default_val(0.9)
        ->check(CLI::Range(0.01, 1.0));
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
                    "KV cache blocks (0 = enough for max-num-seqs full-length sequences within the KV budget)")
        ->default_val(0);
    cmd->add_option_function<uint64_t>(
           "--kv-cache-mb",
           [options](uint64_t mb) {
               options->engine.kv_cache_bytes = mb << 20;
               options->kv_cache_mb_given = true;
           },
           "KV cache budget in MiB when --num-kv-blocks is 0 (default: 1024 on the CPU; on a GPU what "
           "--gpu-memory-utilization leaves)")
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
