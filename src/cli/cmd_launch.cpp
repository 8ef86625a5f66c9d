// `afd launch`: a whole AFD deployment on this machine from one command. Starts F FFN ranks (`afd ffn`) and A
// attention ranks (`afd generate` as attention ranks, the prompts dealt round-robin), waits for every FFN rank
// to be ready, waits for the job, stops the FFN ranks (POST /stop) and checks that each exited cleanly with its
// resources released. Any child dying early tears everything down (SIGTERM, then SIGKILL) with the child named.
// It also runs the dense reference in this process and reports whether AFD produced the same tokens.
// Devices (launch_devices.h): --device cpu|cuda for every rank, or per role; the dense reference runs where the
// attention ranks do (on a GPU, attention rank 0's), or on --reference-device.
// Connector (launch_config.h): cuda_ipc when every rank runs on a GPU and the user names none, else tcp. Ranks that
// share a GPU run under an MPS control daemon (mps_daemon.h: one already running, else one this launch starts and
// stops; --no-mps: none, with a warning).
// Default: a generated tiny model on CPU, 1 attention rank and 2 FFN ranks in m2n.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "attention/attention_rank.h"
#include "attention/engine.h"
#include "attention/offline.h"
#include "cli/commands.h"
#include "cli/ffn_fleet.h"
#include "cli/launch_config.h"
#include "cli/launch_devices.h"
#include "cli/model_loading.h"
#include "cli/model_source.h"
#include "cli/mps_daemon.h"
#include "cli/run_dir.h"
#include "core/child_process.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/signal_watcher.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "transport/afd_config.h"
#include "transport/connector_factory.h"
#include "transport/socket.h"
#include "transport/topology.h"

namespace afd::cli {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct LaunchOptions {
    std::string model;
    std::string additional_config;
    std::vector<std::string> prompt_ids = {"3,17,99,250,7,42,311,5"};
    int64_t max_tokens = 16;
    float temperature = 0.0f;
    int64_t top_k = 0;
    float top_p = 1.0f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    bool json_output = false;
    bool prompt_logits = false;
    bool dbo = false;
    bool reference = true;
    bool mps = true;  // an MPS control daemon for ranks that share a GPU
    LaunchDeviceFlags devices;
    int64_t timeout_s = 600;
    std::string run_dir;
    bool verbose = false;
};

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The reason an attention child's JSON names (finishReasonName's spelling); kNone for one it does not know.
attention::FinishReason finishReasonNamed(const std::string& name) {
    using attention::FinishReason;
    for (FinishReason r : {FinishReason::kLength, FinishReason::kStop, FinishReason::kAborted, FinishReason::kError}) {
        if (attention::finishReasonName(r) == name) return r;
    }
    return FinishReason::kNone;
}

// An attention rank child (`afd generate` as one attention rank).
struct AttentionChild {
    std::string name;
    core::ChildProcess process;
    std::string log_path;
    std::string out_path;
    std::optional<int> exit_code;
};

class Launch {
public:
    explicit Launch(const LaunchOptions& options) : options_(options) {}
    // Whatever path leaves run() (an exception included), no child outlives the launcher.
    ~Launch() { teardown(0); }
    // The job's exit code (core/exit_codes.h). A run that fails after a child started keeps the run directory and
    // names it; any other run removes the temporary one.
    int run();

private:
    int runJob();
    int fail(int code, const std::string& message);
    int teardown(int code);
    // The checks that need no child: the model directory (config.json readable, the checkpoint's headers) and that
    // the AFD config fits the model (m2n: MoE layers, at least one expert per FFN rank). Errors as openModelSource.
    core::Status validateModel(const transport::AfdConfig& afd) const;
    // An attention rank that failed while the FFN ranks were getting ready (a short job may finish first: only a
    // failure counts): kPeerLost.
    core::Status attentionFailed();
    // Once a child has failed: reports every child that has exited non-zero, the likely cause first (a child killed
    // by a signal, then one that failed for a reason of its own, then those that only lost a peer, exit code 3), and
    // tears down with the cause's exit code (core::exitCodeForChild: a killed child is 3).
    int failChildren(const std::string& while_doing);
    core::Result<std::vector<attention::GenerationResult>> denseReference(
        const std::vector<std::vector<int32_t>>& prompts, const attention::SamplingParams& params);

    const LaunchOptions& options_;
    LaunchDevices devices_;
    std::atomic<bool> interrupted_{false};
    std::string binary_;
    RunDir run_dir_;  // NOTE: declared before the children, which write into it
    MpsDaemon mps_;   // NOTE: between the run directory (its pipe and logs) and the children (its clients)
    bool spawned_ = false;
    FfnFleet ffn_;
    std::vector<AttentionChild> attention_;
    std::chrono::steady_clock::time_point deadline_;
};

int Launch::fail(int code, const std::string& message) {
    AFD_LOG_ERROR("{}", message);
    return teardown(code);
}

int Launch::teardown(int code) {
    // SIGTERM to every child still running, one shared 20 s grace period, then SIGKILL for the rest.
    for (auto& r : attention_) r.process.signal(SIGTERM);
    ffn_.terminate(20s);
    for (auto& r : attention_) {
        if (!r.process.wait(1s)) r.process.terminate(1s);
    }
    return code;
}

core::Status Launch::validateModel(const transport::AfdConfig& afd) const {
    if (options_.model.empty()) return core::Status::ok();  // the generated tiny model fits every default
    ModelFlags flags;
    flags.model_dir = options_.model;
    AFD_ASSIGN_OR_RETURN(const ModelSource source, openModelSource(flags));
    if (afd.compute_gate_on_attention) {
        if (source.config.numMoeLayers() == 0) {
            return core::invalidArgument("--model {}: m2n (compute_gate_on_attention) needs MoE layers; it has none",
                                         options_.model);
        }
        AFD_RETURN_IF_ERROR(
            transport::ExpertPartition::create(static_cast<int>(source.config.num_experts), afd.num_ffn_ranks)
                .status()
                .withContext(fmt::format("--model {} with afd.num_ffn_ranks", options_.model)));
    }
    return core::Status::ok();
}

core::Status Launch::attentionFailed() {
    for (auto& a : attention_) {
        if (!a.exit_code) a.exit_code = a.process.poll();
        if (a.exit_code && *a.exit_code != 0) return core::peerLost("{} failed", a.name);
    }
    return core::Status::ok();
}

int Launch::failChildren(const std::string& while_doing) {
    struct Failed {
        const std::string* name;
        int code;
        const std::string* log_path;
    };
    std::vector<Failed> failed;
    for (auto& r : ffn_.ranks()) {
        if (!r.exit_code) r.exit_code = r.process.poll();
        if (r.exit_code && *r.exit_code != 0) failed.push_back({&r.name, *r.exit_code, &r.log_path});
    }
    for (auto& a : attention_) {
        if (!a.exit_code) a.exit_code = a.process.poll();
        if (a.exit_code && *a.exit_code != 0) failed.push_back({&a.name, *a.exit_code, &a.log_path});
    }
    if (failed.empty()) return fail(core::kExitInternal, "a child was reported failed, but every child runs");
    // A lost peer fails the other ranks within a fraction of a second: their code 3 is the consequence.
    auto rank = [](const Failed& f) { return f.code > 128 ? 0 : f.code != core::kExitPeerLost ? 1 : 2; };
    std::stable_sort(failed.begin(), failed.end(), [&](const Failed& a, const Failed& b) { return rank(a) < rank(b); });
    std::string message = childFailureReport(*failed[0].name, failed[0].code, while_doing, *failed[0].log_path);
    for (size_t i = 1; i < failed.size(); ++i) {
        message +=
            fmt::format("\nthen {} {} (log {})", *failed[i].name, describeExit(failed[i].code), *failed[i].log_path);
    }
    return fail(core::exitCodeForChild(failed[0].code), message + "\nstopping every rank");
}

core::Result<std::vector<attention::GenerationResult>> Launch::denseReference(
    const std::vector<std::vector<int32_t>>& prompts, const attention::SamplingParams& params) {
    ModelFlags model;
    model.model_dir = options_.model.empty() ? run_dir_.path() + "/model" : options_.model;
    AFD_ASSIGN_OR_RETURN(ModelSource source, openModelSource(model));
    attention::AttentionRankOptions dense;
    dense.device = devices_.reference;
    dense.engine.scheduler.max_model_len = std::min<int64_t>(source.config.max_position_embeddings, 8192);
    dense.engine.enforce_eager = options_.devices.enforce_eager;
    if (options_.devices.gpu_memory_utilization) {
        dense.gpu.gpu_memory_utilization = *options_.devices.gpu_memory_utilization;
    }
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<attention::AttentionRank> rank,
                         attention::AttentionRank::create(std::move(source), std::move(dense)));
    attention::OfflineGeneration run =
        attention::generateOffline(rank->engine(), prompts, params, false, [this] { return interrupted_.load(); });
    if (!run.isOk()) return run.status;
    return std::move(run.results);
}

int Launch::run() {
    int code = core::kExitInternal;
    try {
        code = runJob();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("internal error: {}; stopping every rank", e.what());
        code = teardown(core::kExitInternal);
    }
    if (code != core::kExitOk && spawned_ && !run_dir_.empty()) {
        run_dir_.keep();
        AFD_LOG_ERROR("the ranks' logs and status files are kept in {}", run_dir_.path());
    }
    return code;
}

int Launch::runJob() {
    auto signals = core::SignalWatcher::create([this](int) { interrupted_ = true; });
    if (!signals.isOk()) return fail(core::kExitInternal, signals.status().message());
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(options_.timeout_s);
    binary_ = std::filesystem::read_symlink("/proc/self/exe").string();

    LaunchConnectorChoice connector;
    connector.every_rank_on_cuda = everyRankOnCuda(options_.devices);
    connector.cuda_ipc_built = transport::connectorCapabilities(transport::ConnectorKind::kCudaIpc).has_value();
    auto root = launchAfdObject(options_.additional_config, connector);
    if (!root.isOk()) return fail(core::kExitBadConfig, root.status().message());
    json afd_json = (*root)["afd"];
    afd_json["role"] = "attention";
    auto afd = transport::AfdConfig::fromJson(afd_json.dump(), transport::Role::kAttention, "--additional-config");
    if (!afd.isOk()) return fail(core::kExitBadConfig, afd.status().message());
    afd_json.erase("role");
    auto devices = resolveLaunchDevices(options_.devices, afd->num_attention_ranks, afd->num_ffn_ranks);
    if (!devices.isOk()) return fail(core::kExitBadConfig, devices.status().message());
    devices_ = *devices;
    if (auto s = validateModel(*afd); !s.isOk()) return fail(exitCodeFor(s), s.message());

    std::vector<std::vector<int32_t>> prompts;
    for (const auto& text : options_.prompt_ids) {
        std::vector<int32_t> ids;
        for (size_t pos = 0; pos <= text.size();) {
            const size_t comma = std::min(text.find(',', pos), text.size());
            int32_t id = 0;
            auto [ptr, ec] = std::from_chars(text.data() + pos, text.data() + comma, id);
            if (ec != std::errc() || ptr != text.data() + comma || comma == pos || id < 0) {
                return fail(core::kExitBadConfig, fmt::format("--prompt-ids {:?} is not a list of token ids", text));
            }
            ids.push_back(id);
            pos = comma + 1;
        }
        prompts.push_back(std::move(ids));
    }

    auto run_dir = RunDir::create(options_.run_dir, "afd-launch-");
    if (!run_dir.isOk()) return fail(core::kExitFailure, run_dir.status().message());
    run_dir_ = std::move(run_dir).value();
    std::string model_dir = options_.model;
    if (model_dir.empty()) {
        model_dir = run_dir_.path() + "/model";
        auto tiny = model::ModelConfig::preset("tiny");
        if (auto s = model::writeSyntheticCheckpoint(model_dir, *tiny, {}); !s.isOk())
            return fail(core::kExitFailure, s.message());
    }
    const std::string child_log_level = options_.verbose ? "info" : "warn";
    const int A = afd->num_attention_ranks;
    const int F = afd->num_ffn_ranks;
    // Share the cores among the children unless the user chose a thread count: A + F pools of all cores each
    // would oversubscribe the machine many times over.
    std::string threads_env;
    if (std::getenv("AFD_NUM_THREADS") == nullptr) {
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        threads_env = std::to_string(std::max(1, cores / (A + F)));
    }

    // Ranks that share a GPU time-slice without MPS; the dense reference (in this process, after them) does not count.
    const std::vector<int> shared_gpus = gpusSharedByRanks(devices_.attention_gpus, devices_.ffn_gpus);
    if (!shared_gpus.empty() && options_.mps) {
        MpsOptions mps;
        mps.dir = run_dir_.path() + "/mps";
        mps.shared_gpus = shared_gpus;
        mps_ = MpsDaemon::ensure(mps);
    } else if (!shared_gpus.empty()) {
        warnSharedGpusTimeSlice(shared_gpus, "--no-mps");
    }
    const std::string mps_kind(shared_gpus.empty() ? "" : mps_.kindName());

    // FFN ranks first (the order does not matter to the connector; it lets the launcher gate on readiness).
    FfnFleetSpec fleet;
    fleet.binary = binary_;
    fleet.model_dir = model_dir;
    fleet.afd = afd_json;
    fleet.num_ffn_ranks = F;
    fleet.device_args = ffnDeviceArgs(options_.devices, devices_, options_.dbo);
    fleet.run_dir = run_dir_.path();
    fleet.log_level = child_log_level;
    fleet.inherit_stderr = options_.verbose;
    fleet.num_threads_env = threads_env;
    fleet.env = mps_.childEnv();
    spawned_ = true;
    auto spawned = FfnFleet::spawn(fleet);
    if (!spawned.isOk()) return fail(core::kExitFailure, spawned.status().message());
    ffn_ = std::move(spawned).value();
    if (auto s = ffn_.waitForAdminPorts(deadline_, interrupted_); !s.isOk()) {
        if (s.code() == core::StatusCode::kPeerLost) return failChildren("starting");
        return fail(exitCodeFor(s), s.message());
    }

    for (int a = 0; a < A; ++a) {
        json cfg = {{"afd", afd_json}};
        cfg["afd"]["role"] = "attention";
        AttentionChild r;
        r.name = fmt::format("attention rank {}", a);
        r.log_path = fmt::format("{}/attention{}.log", run_dir_.path(), a);
        r.out_path = fmt::format("{}/attention{}.json", run_dir_.path(), a);
        core::ChildProcess::Spec spec;
        spec.argv = {binary_,
                     "--log-level",
                     child_log_level,
                     "generate",
                     "--model",
                     model_dir,
                     "--additional-config",
                     cfg.dump(),
                     "--attention-rank",
                     std::to_string(a),
                     "--json",
                     "--max-tokens",
                     std::to_string(options_.max_tokens),
                     "--temperature",
                     fmt::format("{}", options_.temperature),
                     "--top-k",
                     std::to_string(options_.top_k),
                     "--top-p",
                     fmt::format("{}", options_.top_p),
                     "--seed",
                     std::to_string(options_.seed)};
        for (auto& arg : attentionDeviceArgs(options_.devices, devices_)) spec.argv.push_back(std::move(arg));
        if (options_.dbo) spec.argv.push_back("--dbo");
        if (options_.prompt_logits) spec.argv.push_back("--prompt-logits");
        if (options_.ignore_eos) spec.argv.push_back("--ignore-eos");
        for (size_t i = static_cast<size_t>(a); i < options_.prompt_ids.size(); i += static_cast<size_t>(A)) {
            spec.argv.push_back("--prompt-ids");
            spec.argv.push_back(options_.prompt_ids[i]);
        }
        if (!threads_env.empty()) spec.env.emplace_back("AFD_NUM_THREADS", threads_env);
        for (const auto& var : mps_.childEnv()) spec.env.push_back(var);
        spec.stdout_path = r.out_path;
        spec.stderr_path = options_.verbose ? "" : r.log_path;
        auto child = core::ChildProcess::spawn(spec);
        if (!child.isOk()) return fail(core::kExitFailure, child.status().message());
        r.process = std::move(child).value();
        attention_.push_back(std::move(r));
    }
    if (auto s = ffn_.waitForReady(deadline_, interrupted_, [this] { return attentionFailed(); }); !s.isOk()) {
        if (s.code() == core::StatusCode::kPeerLost) return failChildren("the FFN ranks were getting ready");
        return fail(exitCodeFor(s), s.message());
    }

    // The job: wait for every attention rank; any FFN rank exiting meanwhile is a failure.
    for (auto& r : attention_) {
        while (!(r.exit_code = r.process.poll())) {
            if (interrupted_) return fail(core::kExitFailure, "interrupted: stopping every rank");
            if (auto s = ffn_.checkRunning("attention ranks were running"); !s.isOk()) {
                return failChildren("the attention ranks were running");
            }
            if (std::chrono::steady_clock::now() > deadline_) {
                return fail(core::kExitFailure,
                            fmt::format("the job did not finish within --timeout {} s", options_.timeout_s));
            }
            std::this_thread::sleep_for(10ms);
        }
        if (*r.exit_code != 0) return failChildren("the attention ranks were running");
    }
    std::vector<json> ffn_status;
    for (size_t k = 0; k < ffn_.ranks().size(); ++k) ffn_status.push_back(ffn_.status(k));
    // Ordered stop: POST /stop to every FFN rank, then wait for each to exit and check its status file.
    const bool clean = ffn_.stop(20s);
    // Every rank has exited: a daemon this launch started goes before the dense reference takes the GPU here.
    mps_.stop();

    // Results in prompt order (rank a held prompts a, a + A, a + 2A …).
    std::vector<attention::GenerationResult> results(prompts.size());
    std::vector<json> layer_timings;
    for (int a = 0; a < A; ++a) {
        const json out = json::parse(readFile(attention_[static_cast<size_t>(a)].out_path), nullptr, false);
        if (out.is_discarded()) return fail(core::kExitFailure, fmt::format("attention rank {} printed no JSON", a));
        const json items = out.value("results", json::array());
        for (size_t i = 0; i < items.size(); ++i) {
            const size_t index = static_cast<size_t>(a) + i * static_cast<size_t>(A);
            if (index >= results.size()) {
                return fail(core::kExitFailure,
                            fmt::format("attention rank {} returned more results than it had prompts", a));
            }
            auto& r = results[index];
            try {
                r.prompt_ids = items[i].at("prompt_ids").get<std::vector<int32_t>>();
                r.new_ids = items[i].at("new_ids").get<std::vector<int32_t>>();
                r.finish_reason = finishReasonNamed(items[i].at("finish_reason").get<std::string>());
                if (options_.prompt_logits) {
                    r.prompt_last_logits = items[i].at("prompt_last_logits").get<std::vector<float>>();
                }
            } catch (const json::exception& e) {
                return fail(core::kExitFailure,
                            fmt::format("attention rank {} printed malformed JSON: {}", a, e.what()));
            }
        }
        layer_timings.push_back(out.value("layer_timings", json::array()));
    }
    std::optional<bool> matches;
    if (options_.reference) {
        attention::SamplingParams params;
        params.max_tokens = options_.max_tokens;
        params.temperature = options_.temperature;
        params.top_k = options_.top_k;
        params.top_p = options_.top_p;
        params.seed = options_.seed;
        params.ignore_eos = options_.ignore_eos;
        const auto dense_result = denseReference(prompts, params);
        if (!dense_result.isOk())
            return fail(core::kExitFailure, "dense reference: " + dense_result.status().message());
        const auto& dense = *dense_result;
        matches = true;
        for (size_t i = 0; i < prompts.size(); ++i) matches = *matches && dense[i].new_ids == results[i].new_ids;
    }

    // Per layer: attention-side transfer time (mean over attention ranks), FFN compute and wait (max over ranks).
    json layers = json::array();
    const size_t num_layers = layer_timings.empty() ? 0 : layer_timings[0].size();
    for (size_t l = 0; l < num_layers; ++l) {
        double transfer = 0.0;
        for (const auto& t : layer_timings) transfer += t[l].value("transfer_seconds", 0.0);
        transfer /= static_cast<double>(layer_timings.size());
        double compute = 0.0, wait = 0.0;
        bool crosses = false;
        for (const auto& s : ffn_status) {
            for (const auto& entry : s.value("layers", json::array())) {
                if (entry.value("layer", -1) != static_cast<int>(l)) continue;
                crosses = true;
                compute = std::max(compute, entry.value("compute_seconds", 0.0));
                wait = std::max(wait, entry.value("wait_seconds", 0.0));
            }
        }
        layers.push_back({{"layer", l},
                          {"crosses", crosses},
                          {"attention_transfer_seconds", transfer},
                          {"ffn_compute_seconds", compute},
                          {"ffn_wait_seconds", wait}});
    }

    if (options_.json_output) {
        // generate's schema (one entry per prompt, in prompt order), plus the deployment's report under "afd".
        json out = {{"results", json::array()}};
        for (const auto& r : results) {
            json one = {{"prompt_ids", r.prompt_ids},
                        {"new_ids", r.new_ids},
                        {"finish_reason", attention::finishReasonName(r.finish_reason)}};
            if (options_.prompt_logits) one["prompt_last_logits"] = r.prompt_last_logits;
            out["results"].push_back(std::move(one));
        }
        out["afd"] = {{"num_attention_ranks", A},
                      {"num_ffn_ranks", F},
                      {"mode", afd->compute_gate_on_attention ? "m2n" : "p2p"},
                      {"connector", std::string(transport::connectorName(afd->connector))},
                      {"shared_gpus", shared_gpus},
                      {"mps", mps_kind.empty() ? json(nullptr) : json(mps_kind)},
                      {"layers", layers},
                      {"matches_dense_reference", matches ? json(*matches) : json(nullptr)},
                      {"reference_device", matches ? json(devices_.reference.toString()) : json(nullptr)},
                      {"clean_shutdown", clean}};
        std::cout << out.dump() << "\n";
    } else {
        std::cout << fmt::format("AFD {} over {} with {} attention rank(s) and {} FFN rank(s), model {}\n",
                                 afd->compute_gate_on_attention ? "m2n" : "p2p",
                                 transport::connectorName(afd->connector), A, F, model_dir);
        if (!shared_gpus.empty()) {
            std::cout << fmt::format("GPU(s) {} shared by ranks, MPS daemon: {}\n", fmt::join(shared_gpus, ","),
                                     mps_kind);
        }
        for (size_t i = 0; i < results.size(); ++i) {
            std::cout << fmt::format("prompt {} [{}] -> {}\n", i, fmt::join(results[i].prompt_ids, ","),
                                     fmt::join(results[i].new_ids, ","));
        }
        std::cout << "layer  crosses  attention transfer (ms)  FFN compute (ms)  FFN wait (ms)\n";
        for (const auto& l : layers) {
            std::cout << fmt::format(
                "{:>5}  {:>7}  {:>23.3f}  {:>16.3f}  {:>13.3f}\n", l["layer"].get<int>(),
                l["crosses"].get<bool>() ? "yes" : "no", 1e3 * l["attention_transfer_seconds"].get<double>(),
                1e3 * l["ffn_compute_seconds"].get<double>(), 1e3 * l["ffn_wait_seconds"].get<double>());
        }
        if (matches) {
            std::cout << fmt::format("matches the dense reference ({}): {}\n", devices_.reference.toString(),
                                     *matches ? "yes" : "NO");
        }
        std::cout << fmt::format("FFN ranks stopped cleanly with resources released: {}\n", clean ? "yes" : "NO");
    }
    if (!clean) return core::kExitFailure;
    if (matches && !*matches) {
        AFD_LOG_ERROR("AFD tokens differ from the dense reference");
        return core::kExitFailure;
    }
    return core::kExitOk;
}

}  // namespace

void addLaunchCommand(CLI::App& app, int& exit_code) {
    auto o = std::make_shared<LaunchOptions>();
    CLI::App* cmd = app.add_subcommand("launch", "Start a local AFD deployment (FFN + attention ranks) and run a job");
    cmd->add_option("--model", o->model, "model directory (default: a generated tiny model)");
    cmd->add_option("--additional-config", o->additional_config,
                    "JSON {\"afd\": {...}}: ranks, compute_gate_on_attention, host, port … (role is implied)");
    cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids; repeat for several prompts")->take_all();
    cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate per prompt")->default_val(16);
    cmd->add_option("--temperature", o->temperature, "0 = greedy")->default_val(0.0f);
    cmd->add_option("--top-k", o->top_k, "0 = off")->default_val(0);
    cmd->add_option("--top-p", o->top_p, "1 = off")->default_val(1.0f);
    cmd->add_option("--seed", o->seed, "sampling seed")->default_val(0);
    cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at end-of-sequence tokens");
    cmd->add_flag("--json", o->json_output, "print the generate JSON (plus an \"afd\" report)");
    cmd->add_flag("--prompt-logits", o->prompt_logits, "with --json: each result's prompt_last_logits too");
    cmd->add_flag("--dbo", o->dbo, "two-stage steps (dual-batch overlap) on the attention ranks");
    cmd->add_flag("!--no-reference", o->reference, "skip the dense reference comparison");
    cmd->add_flag("!--no-mps", o->mps,
                  "no MPS control daemon for ranks that share a GPU (default: use a running one, else start one)");
    addLaunchDeviceFlags(*cmd, o->devices);
    cmd->add_option("--timeout", o->timeout_s, "seconds for the whole job")->default_val(600);
    cmd->add_option("--run-dir", o->run_dir, "keep logs and status files here (default: a temporary directory)");
    cmd->add_flag("--verbose", o->verbose, "children log to this terminal at info level");
    cmd->callback([o, &exit_code] {
        Launch launch(*o);
        exit_code = launch.run();
    });
}

}  // namespace afd::cli
