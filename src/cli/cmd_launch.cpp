// `afd launch`: a whole AFD deployment on this machine from one command. Starts F FFN ranks (`afd ffn`) and A
// attention ranks (`afd generate` as attention ranks, the prompts dealt round-robin), waits for every FFN rank
// to be ready, waits for the job, stops the FFN ranks (POST /stop) and checks that each exited cleanly with its
// resources released. Any child dying early tears everything down (SIGTERM, then SIGKILL) with the child named.
// It also runs the dense reference in this process and reports whether AFD produced the same tokens.
// Devices (launch_devices.h): --device cpu|cuda for every rank, or per role; the dense reference runs where the
// attention ranks do (on a GPU, attention rank 0's), or on --reference-device.
// Default: a generated tiny model on CPU, 1 attention rank and 2 FFN ranks in m2n.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

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
#include "cli/launch_devices.h"
#include "cli/model_source.h"
#include "core/child_process.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/signal_watcher.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "transport/afd_config.h"
#include "transport/socket.h"

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
    bool json_output = false;
    bool dbo = false;
    bool reference = true;
    LaunchDeviceFlags devices;
    int64_t timeout_s = 600;
    std::string run_dir;
    bool verbose = false;
};

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The user's afd object with the launcher's defaults filled in (launchDefaults). The role is implied per child, so
// giving one is an error.
core::Result<json> afdObject(const std::string& text) {
    json root = json::object();
    if (!text.empty()) {
        // The config's own parser first: it names the key and the rule, and refuses what is not safe to walk
        // (e.g. nesting deeper than it allows) before this function copies or prints anything of it.
        auto checked = transport::parseAdditionalConfig(text, transport::Role::kAttention);
        if (!checked.isOk()) return checked.status();
        root = json::parse(text, nullptr, false);
        if (root.is_discarded() || !root.is_object())
            return core::invalidArgument("--additional-config must be a JSON object");
    }
    if (!root.contains("afd")) root["afd"] = json::object();
    json& afd = root["afd"];
    if (!afd.is_object()) return core::invalidArgument("--additional-config: \"afd\" must be an object");
    for (const char* key : {"role", "afd_role"}) {
        if (afd.contains(key))
            return core::invalidArgument("--additional-config: afd.{} is implied by afd launch (it starts both roles)",
                                         key);
    }
    AFD_RETURN_IF_ERROR(launchDefaults(afd));
    return root;
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
    int run();

private:
    int fail(int code, const std::string& message);
    int teardown(int code);
    // An attention rank that failed while the FFN ranks were getting ready (a short job may finish first: only a
    // failure counts).
    core::Status attentionFailed();
    core::Result<std::vector<attention::GenerationResult>> denseReference(
        const std::vector<std::vector<int32_t>>& prompts, const attention::SamplingParams& params);

    const LaunchOptions& options_;
    LaunchDevices devices_;
    std::atomic<bool> interrupted_{false};
    std::string binary_;
    std::string run_dir_;
    bool own_run_dir_ = false;
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

core::Status Launch::attentionFailed() {
    for (auto& a : attention_) {
        const auto code = a.process.poll();
        if (code && *code != 0) {
            a.exit_code = code;
            AFD_LOG_ERROR(
                "{} exited with code {} while the FFN ranks were getting ready; last lines of its log ({}):\n{}",
                a.name, *code, a.log_path, logTail(a.log_path, 15));
            return core::internalError("an attention rank failed during start-up");
        }
    }
    return core::Status::ok();
}

core::Result<std::vector<attention::GenerationResult>> Launch::denseReference(
    const std::vector<std::vector<int32_t>>& prompts, const attention::SamplingParams& params) {
    ModelFlags model;
    model.model_dir = options_.model.empty() ? run_dir_ + "/model" : options_.model;
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
    return attention::generateOffline(rank->engine(), prompts, params, false, [this] { return interrupted_.load(); });
}

int Launch::run() {
    auto signals = core::SignalWatcher::create([this](int) { interrupted_ = true; });
    if (!signals.isOk()) return fail(core::kExitInternal, signals.status().message());
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(options_.timeout_s);
    binary_ = std::filesystem::read_symlink("/proc/self/exe").string();

    auto root = afdObject(options_.additional_config);
    if (!root.isOk()) return fail(core::kExitBadConfig, root.status().message());
    json afd_json = (*root)["afd"];
    afd_json["role"] = "attention";
    auto afd = transport::AfdConfig::fromJson(afd_json.dump(), transport::Role::kAttention, "--additional-config");
    if (!afd.isOk()) return fail(core::kExitBadConfig, afd.status().message());
    afd_json.erase("role");
    auto devices = resolveLaunchDevices(options_.devices, afd->num_attention_ranks, afd->num_ffn_ranks);
    if (!devices.isOk()) return fail(core::kExitBadConfig, devices.status().message());
    devices_ = *devices;

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

    if (options_.run_dir.empty()) {
        char templ[] = "/tmp/afd-launch-XXXXXX";
        if (::mkdtemp(templ) == nullptr) return fail(core::kExitFailure, "cannot create a run directory under /tmp");
        run_dir_ = templ;
        own_run_dir_ = true;
    } else {
        run_dir_ = options_.run_dir;
        std::filesystem::create_directories(run_dir_);
    }
    std::string model_dir = options_.model;
    if (model_dir.empty()) {
        model_dir = run_dir_ + "/model";
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

    // FFN ranks first (the order does not matter to the connector; it lets the launcher gate on readiness).
    FfnFleetSpec fleet;
    fleet.binary = binary_;
    fleet.model_dir = model_dir;
    fleet.afd = afd_json;
    fleet.num_ffn_ranks = F;
    fleet.device_args = ffnDeviceArgs(devices_);
    fleet.run_dir = run_dir_;
    fleet.log_level = child_log_level;
    fleet.inherit_stderr = options_.verbose;
    fleet.num_threads_env = threads_env;
    auto spawned = FfnFleet::spawn(fleet);
    if (!spawned.isOk()) return fail(core::kExitFailure, spawned.status().message());
    ffn_ = std::move(spawned).value();
    if (auto s = ffn_.waitForAdminPorts(deadline_, interrupted_); !s.isOk())
        return fail(core::kExitFailure, s.message());

    for (int a = 0; a < A; ++a) {
        json cfg = {{"afd", afd_json}};
        cfg["afd"]["role"] = "attention";
        AttentionChild r;
        r.name = fmt::format("attention rank {}", a);
        r.log_path = fmt::format("{}/attention{}.log", run_dir_, a);
        r.out_path = fmt::format("{}/attention{}.json", run_dir_, a);
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
        for (size_t i = static_cast<size_t>(a); i < options_.prompt_ids.size(); i += static_cast<size_t>(A)) {
            spec.argv.push_back("--prompt-ids");
            spec.argv.push_back(options_.prompt_ids[i]);
        }
        if (!threads_env.empty()) spec.env.emplace_back("AFD_NUM_THREADS", threads_env);
        spec.stdout_path = r.out_path;
        spec.stderr_path = options_.verbose ? "" : r.log_path;
        auto child = core::ChildProcess::spawn(spec);
        if (!child.isOk()) return fail(core::kExitFailure, child.status().message());
        r.process = std::move(child).value();
        attention_.push_back(std::move(r));
    }
    if (auto s = ffn_.waitForReady(deadline_, interrupted_, [this] { return attentionFailed(); }); !s.isOk()) {
        return fail(core::kExitFailure, s.message());
    }

    // The job: wait for every attention rank; any FFN rank exiting meanwhile is a failure.
    for (auto& r : attention_) {
        while (!(r.exit_code = r.process.poll())) {
            if (interrupted_) return fail(core::kExitFailure, "interrupted: stopping every rank");
            if (auto s = ffn_.checkRunning("attention ranks were running"); !s.isOk()) {
                AFD_LOG_ERROR("{}", s.message());
                return fail(core::kExitPeerLost, "an FFN rank died during the job; stopping every rank");
            }
            if (std::chrono::steady_clock::now() > deadline_) {
                return fail(core::kExitFailure,
                            fmt::format("the job did not finish within --timeout {} s", options_.timeout_s));
            }
            std::this_thread::sleep_for(10ms);
        }
        if (*r.exit_code != 0) {
            AFD_LOG_ERROR("{} exited with code {}; last lines of its log ({}):\n{}", r.name, *r.exit_code, r.log_path,
                          logTail(r.log_path, 15));
            return fail(*r.exit_code, "an attention rank failed; stopping every rank");
        }
    }
    std::vector<json> ffn_status;
    for (size_t k = 0; k < ffn_.ranks().size(); ++k) ffn_status.push_back(ffn_.status(k));
    // Ordered stop: POST /stop to every FFN rank, then wait for each to exit and check its status file.
    const bool clean = ffn_.stop(20s);

    // Results in prompt order (rank a held prompts a, a + A, a + 2A …).
    std::vector<attention::GenerationResult> results(prompts.size());
    std::vector<json> layer_timings;
    for (int a = 0; a < A; ++a) {
        const json out = json::parse(readFile(attention_[static_cast<size_t>(a)].out_path), nullptr, false);
        if (out.is_discarded()) return fail(core::kExitFailure, fmt::format("attention rank {} printed no JSON", a));
        std::vector<json> items;
        if (out.contains("results")) {
            for (const auto& item : out["results"]) items.push_back(item);
        } else if (out.contains("new_ids")) {
            items.push_back(out);
        }
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
                r.prompt_last_logits = items[i].at("prompt_last_logits").get<std::vector<float>>();
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
        auto one = [](const attention::GenerationResult& r) {
            return json{
                {"prompt_ids", r.prompt_ids}, {"new_ids", r.new_ids}, {"prompt_last_logits", r.prompt_last_logits}};
        };
        json out = results.size() == 1 ? one(results[0]) : json{{"results", json::array()}};
        if (results.size() != 1) {
            for (const auto& r : results) out["results"].push_back(one(r));
        }
        out["afd"] = {{"num_attention_ranks", A},
                      {"num_ffn_ranks", F},
                      {"mode", afd->compute_gate_on_attention ? "m2n" : "p2p"},
                      {"layers", layers},
                      {"matches_dense_reference", matches ? json(*matches) : json(nullptr)},
                      {"reference_device", matches ? json(devices_.reference.toString()) : json(nullptr)},
                      {"clean_shutdown", clean}};
        std::cout << out.dump() << "\n";
    } else {
        std::cout << fmt::format("AFD {} with {} attention rank(s) and {} FFN rank(s), model {}\n",
                                 afd->compute_gate_on_attention ? "m2n" : "p2p", A, F, model_dir);
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
    if (own_run_dir_ && clean && matches.value_or(true)) std::filesystem::remove_all(run_dir_);
    if (!clean) return core::kExitFailure;
    if (matches && !*matches) {
        AFD_LOG_ERROR("AFD tokens differ from the dense reference (logs kept in {})", run_dir_);
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
    cmd->add_flag("--json", o->json_output, "print the generate JSON (plus an \"afd\" report)");
    cmd->add_flag("--dbo", o->dbo, "two-stage steps (dual-batch overlap) on the attention ranks");
    cmd->add_flag("!--no-reference", o->reference, "skip the dense reference comparison");
    addLaunchDeviceFlags(*cmd, o->devices);
    cmd->add_option("--timeout", o->timeout_s, "seconds for the whole job")->default_val(600);
    cmd->add_option("--run-dir", o->run_dir, "keep logs and status files here (default: a temporary directory)");
    cmd->add_flag("--verbose", o->verbose, "children log to this terminal at info level");
    cmd->callback([o, &exit_code] {
        Launch launch(*o);
        try {
            exit_code = launch.run();
        } catch (const std::exception& e) {
            AFD_LOG_ERROR("internal error: {}; stopping every rank", e.what());
            exit_code = core::kExitInternal;
        }
    });
}

}  // namespace afd::cli
