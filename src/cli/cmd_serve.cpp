// `afd serve MODEL`: the OpenAI-compatible API (serve/api_server.h) on an attention rank, with continuous batching.
// Without an AFD config it serves the dense engine (the whole model in this process); with one it is attention rank
// 0 of a local deployment whose FFN ranks it starts (FfnFleet), or, when the config says role "attention", one
// attention rank of a deployment whose FFN ranks run elsewhere (serve_deployment.h).
//
// Order: the HTTP port is bound first (a taken port fails before anything loads); the FFN ranks start; the weights
// load (a progress bar on a terminal); the rank connects to its FFN peers; the engine and its loop start; then the
// server answers. SIGTERM or SIGINT stops it: the server stops taking requests and ends the streams in flight, the
// engine loop stops, the FFN peers learn that the rank leaves, and the FFN ranks this process started stop (POST
// /stop) and are checked to have exited cleanly. Before serving, it ends the load after the layer in hand (or the
// wait in hand), stops the FFN ranks started and exits 0. An FFN rank that dies while serving fails the requests in
// flight (the engine reports itself unhealthy: /health answers 503) and the server keeps answering until it is stopped.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "attention/attention_rank.h"
#include "cli/attention_flags.h"
#include "cli/commands.h"
#include "cli/ffn_fleet.h"
#include "cli/load_progress.h"
#include "cli/model_loading.h"
#include "cli/run_dir.h"
#include "cli/serve_deployment.h"
#include "core/env.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/signal_watcher.h"
#include "serve/api_server.h"
#include "serve/serving_metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "transport/afd_config.h"
#include "transport/socket.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;

struct ServeOptions {
    AttentionFlags rank;
    std::string model;  // the positional MODEL (or --model)
    std::string tokenizer_file;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string served_model_name;
    int api_threads = 0;  // 0: the server's default
    std::optional<std::string> ffn_device;
    std::string ffn_device_ids;
    std::string run_dir;
    std::string port_file;  // the bound port is written here once the server answers
    int64_t startup_timeout_s = 600;
    bool verbose = false;
};

int fail(const core::Status& status) {
    AFD_LOG_ERROR("{}", status.message());
    return exitCodeFor(status);
}

// The tokenizer: --tokenizer FILE, else MODEL/tokenizer.json when present; none otherwise (token-id prompts only).
// The chat template is read from tokenizer_config.json beside the tokenizer.
struct TokenizerSetup {
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;
    std::string path;
    bool qwen3_chat = false;
};

core::Result<TokenizerSetup> loadTokenizer(const std::string& flag, const std::string& model_dir) {
    TokenizerSetup t;
    namespace fs = std::filesystem;
    if (!flag.empty()) {
        t.path = flag;
    } else if (!model_dir.empty() && fs::exists(fs::path(model_dir) / "tokenizer.json")) {
        t.path = (fs::path(model_dir) / "tokenizer.json").string();
    } else {
        return t;
    }
    auto loaded = tokenizer::Tokenizer::fromFile(t.path);
    if (!loaded.isOk()) return core::invalidArgument("--tokenizer: {}", loaded.status().message());
    t.tokenizer = std::make_unique<tokenizer::Tokenizer>(std::move(loaded).value());
    const fs::path config = fs::path(t.path).parent_path() / "tokenizer_config.json";
    if (fs::exists(config)) {
        AFD_ASSIGN_OR_RETURN(const std::string chat_template, tokenizer::readChatTemplate(config.string()));
        t.qwen3_chat = tokenizer::isQwen3ChatTemplate(chat_template);
        if (!t.qwen3_chat) {
            AFD_LOG_WARN(
                "{}: the chat template is not Qwen3's, the one afd renders: /v1/chat/completions is refused "
                "(completions take text and token ids)",
                config.string());
        }
    } else {
        AFD_LOG_WARN("no tokenizer_config.json beside {}: /v1/chat/completions renders the Qwen3 chat template",
                     t.path);
        t.qwen3_chat = true;
    }
    return t;
}

// Written whole under a temporary name and renamed, so a reader never sees a partial port.
core::Status writePortFile(const std::string& path, int port) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        out << port;
        if (!out) return core::ioError("--port-file {}: cannot write it", path);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return core::ioError("--port-file {}: {}", path, ec.message());
    return core::Status::ok();
}

class Serve {
public:
    explicit Serve(ServeOptions options) : options_(std::move(options)) {}
    // The exit code (core/exit_codes.h). A run that fails after the FFN ranks started keeps their run directory and
    // names it; any other run removes the temporary one.
    int run();

private:
    int serve();
    core::Status startFfnRanks(const ServeDeployment& deployment, const std::string& model_dir);
    // An error from the FFN fleet: a rank that exited gives its launcher exit code (a killed one 3).
    int failFleet(const core::Status& status);
    // A step of the start-up (the load, the FFN ranks' start, the connection) that failed: when it was cancelled by
    // SIGTERM or SIGINT, a stop asked for before serving, which stops the FFN ranks started and exits 0 (1 when one
    // does not stop cleanly); any other error fails the run.
    int failStartup(const core::Status& status, bool from_fleet);

    ServeOptions options_;
    std::atomic<bool> interrupted_{false};
    std::unique_ptr<transport::Canceller> cancel_;
    RunDir run_dir_;  // NOTE: declared before the fleet, which writes into it
    FfnFleet fleet_;
    std::chrono::steady_clock::time_point deadline_;
};

core::Status Serve::startFfnRanks(const ServeDeployment& deployment, const std::string& model_dir) {
    FfnFleetSpec spec;
    spec.binary = std::filesystem::read_symlink("/proc/self/exe").string();
    spec.model_dir = model_dir;
    spec.afd = deployment.ffn_afd;
    spec.num_ffn_ranks = deployment.num_ffn_ranks;
    const std::string device = options_.ffn_device.value_or(options_.rank.device.device);
    spec.device_args = {"--device", device};
    if (!options_.ffn_device_ids.empty()) {
        spec.device_args.push_back("--device-ids");
        spec.device_args.push_back(options_.ffn_device_ids);
    }
    spec.run_dir = run_dir_.path();
    spec.log_level = options_.verbose ? "info" : "warn";
    spec.inherit_stderr = options_.verbose;
    if (std::getenv("AFD_NUM_THREADS") == nullptr && device == "cpu") {
        // The FFN ranks and this process share the cores.
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        spec.num_threads_env = std::to_string(std::max(1, cores / (deployment.num_ffn_ranks + 1)));
    }
    AFD_ASSIGN_OR_RETURN(fleet_, FfnFleet::spawn(spec));
    AFD_LOG_INFO("started {} FFN rank(s) on {} (logs in {})", deployment.num_ffn_ranks, device, run_dir_.path());
    return fleet_.waitForAdminPorts(deadline_, interrupted_);
}

int Serve::failFleet(const core::Status& status) {
    AFD_LOG_ERROR("{}", status.message());
    return status.code() == core::StatusCode::kPeerLost ? fleet_.failedRankExitCode() : exitCodeFor(status);
}

int Serve::failStartup(const core::Status& status, bool from_fleet) {
    if (!interrupted_ || status.code() != core::StatusCode::kCancelled) {
        return from_fleet ? failFleet(status) : fail(status);
    }
    AFD_LOG_INFO("stopped before serving: {}", status.message());
    if (!fleet_.ranks().empty() && !fleet_.stop(20s)) return core::kExitFailure;
    std::cout << "afd serve: stopped before serving\n";
    return core::kExitOk;
}

int Serve::run() {
    int code = core::kExitInternal;
    try {
        code = serve();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("internal error: {}; stopping", e.what());
    }
    if (code != core::kExitOk && !fleet_.ranks().empty() && !run_dir_.empty()) {
        run_dir_.keep();
        AFD_LOG_ERROR("the FFN ranks' logs and status files are kept in {}", run_dir_.path());
    }
    return code;
}

int Serve::serve() {
    auto canceller = transport::Canceller::create();
    if (!canceller.isOk()) return fail(canceller.status());
    cancel_ = std::move(canceller).value();
    auto signals = core::SignalWatcher::create([this](int) {
        interrupted_ = true;
        cancel_->cancel();
    });
    if (!signals.isOk()) return fail(signals.status());
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(options_.startup_timeout_s);

    AttentionFlags& flags = options_.rank;
    if (!options_.model.empty()) {
        if (!flags.model.model_dir.empty() && flags.model.model_dir != options_.model) {
            return fail(core::invalidArgument("MODEL {:?} and --model {:?} name different models", options_.model,
                                              flags.model.model_dir));
        }
        flags.model.model_dir = options_.model;
    }
    std::optional<std::string> config_text = flags.additional_config;
    if (flags.afd_config_file) {
        if (config_text) return fail(core::invalidArgument("give --additional-config or --afd-config, not both"));
        auto file = transport::loadAfdConfigFile(*flags.afd_config_file, std::nullopt);
        if (!file.isOk()) return fail(core::invalidArgument("{}", file.status().message()));
        config_text = fmt::format("{{\"afd\":{}}}", file->toJson());
        flags.afd_config_file.reset();
    }
    auto deployment = resolveServeDeployment(config_text);
    if (!deployment.isOk()) return fail(deployment.status());
    if (deployment->afd) flags.additional_config = deployment->attention_config;
    auto setup = resolveAttentionFlags(flags);
    if (!setup.isOk()) return fail(setup.status());
    auto tokenizer = loadTokenizer(options_.tokenizer_file, flags.model.model_dir);
    if (!tokenizer.isOk()) return fail(tokenizer.status());
    if (!tokenizer->tokenizer) {
        AFD_LOG_WARN(
            "no tokenizer (no --tokenizer and no tokenizer.json in the model directory): prompts must be token "
            "ids, and /v1/chat/completions is refused");
    } else if (tokenizer->tokenizer->idLimit() > setup->source.config.vocab_size) {
        return fail(core::invalidArgument("--tokenizer {}: its ids reach {}, beyond the model's vocab_size {}",
                                          tokenizer->path, tokenizer->tokenizer->idLimit() - 1,
                                          setup->source.config.vocab_size));
    }
    const core::Device device = setup->options.device;
    const std::string model_name =
        !options_.served_model_name.empty() ? options_.served_model_name : setup->source.name;

    // The HTTP port first: a port in use fails here, before the FFN ranks start or any weight loads.
    serve::ApiServerOptions api;
    api.http.host = options_.host;
    api.http.port = options_.port;
    if (options_.api_threads > 0) api.http.num_threads = options_.api_threads;
    api.served_model_name = model_name;
    api.max_model_len = setup->options.engine.scheduler.max_model_len;
    api.chat_template = tokenizer->qwen3_chat ? serve::ChatTemplate::kQwen3 : serve::ChatTemplate::kNone;
    serve::ApiServer server(api);
    // A port in use (or an address that cannot be bound) is found before any work: bad input, exit code 2.
    if (auto s = server.bind(); !s.isOk()) return fail(core::invalidArgument("{}", s.message()));
    AFD_LOG_INFO("afd serve: bound http://{}:{}; loading", options_.host, server.port());

    // NOTE: AFD_TEST_LOAD_DELAY_MS, for tests only: a sleep after each layer loads (LoadProgressReporter).
    auto test_load_delay_ms = core::envInt("AFD_TEST_LOAD_DELAY_MS", 0, 0, 60000);
    if (!test_load_delay_ms.isOk()) return fail(test_load_delay_ms.status());

    if (deployment->start_ffn_ranks) {
        auto run_dir = RunDir::create(options_.run_dir, "afd-serve-");
        if (!run_dir.isOk()) return fail(run_dir.status());
        run_dir_ = std::move(run_dir).value();
        if (auto s = startFfnRanks(*deployment, flags.model.model_dir); !s.isOk()) return failStartup(s, true);
    }

    setup->options.setup_cancel = cancel_.get();
    // A stop (SIGTERM, SIGINT) ends the load after the layer in hand.
    LoadProgressReporter progress(
        deployment->afd ? "attention rank weights" : "weights", [this] { return interrupted_.load(); },
        *test_load_delay_ms);
    setup->options.on_load_progress = progress.callback();
    auto rank = attention::AttentionRank::configure(std::move(setup->source), std::move(setup->options));
    if (!rank.isOk()) return fail(rank.status());
    attention::AttentionRank& r = **rank;
    if (auto s = r.load(); !s.isOk()) return failStartup(s, false);
    if (auto s = r.connect(); !s.isOk()) {
        if (auto died = fleet_.checkRunning("the attention rank was connecting"); !died.isOk()) return failFleet(died);
        return failStartup(s, false);
    }
    if (auto s = r.startEngine(); !s.isOk()) return fail(s);
    if (deployment->start_ffn_ranks) {
        if (auto s = fleet_.waitForReady(deadline_, interrupted_); !s.isOk()) return failStartup(s, true);
    }

    serve::ServingMetricsOptions metrics_options;
    metrics_options.ffn_admin_ports = fleet_.adminPorts();
    serve::ServingMetrics metrics(metrics_options);
    attention::EngineLoopOptions loop_options;
    loop_options.on_step = [&metrics](const attention::StepReport& report, const attention::Engine& engine) {
        metrics.onStep(report, engine);
    };
    attention::EngineLoop& loop = r.startLoop(std::move(loop_options));
    metrics.setStatsSource([&loop] { return loop.stats(); });
    if (auto s = server.start(
            loop, tokenizer->tokenizer.get(), [&metrics] { return metrics.render(); },
            [&metrics](const serve::RequestRecord& record) { metrics.onRequestDone(record); });
        !s.isOk()) {
        return fail(s);
    }
    const std::string what = !r.isAfd() ? fmt::format("the dense engine on {}", device.toString())
                                        : fmt::format("attention rank {} on {}, AFD {}", flags.attention_rank,
                                                      device.toString(), r.afd()->fingerprint());
    std::cout << fmt::format("afd serve: {} on http://{}:{} ({}); Ctrl-C stops it\n", model_name, options_.host,
                             server.port(), what)
              << std::flush;
    if (!options_.port_file.empty()) {
        if (auto s = writePortFile(options_.port_file, server.port()); !s.isOk()) return fail(s);
    }

    bool reported_unhealthy = false;
    std::optional<int> lost_code;  // an FFN rank this process started died: the exit code once stopped
    // The engine stopped serving while every rank lived (a step timeout on a stopped or stalled FFN rank): the exit
    // code of its error once stopped, so that a lost peer is 3 whether or not the rank died.
    std::optional<int> engine_code;
    while (!interrupted_) {
        std::this_thread::sleep_for(100ms);
        if (auto s = fleet_.checkRunning("serving"); !s.isOk()) {
            AFD_LOG_ERROR("{}; requests fail with 503 until afd serve is stopped", s.message());
            if (!lost_code) lost_code = fleet_.failedRankExitCode();
        }
        const core::Status health = loop.health();
        if (!health.isOk() && !reported_unhealthy) {
            AFD_LOG_ERROR("the engine stopped serving: {}; /health answers 503 until afd serve is stopped",
                          health.message());
            reported_unhealthy = true;
            engine_code = exitCodeFor(health);
        }
    }
    AFD_LOG_INFO("stopping: the API server, the engine, then the FFN ranks");
    server.stop();
    const core::Status finished = r.shutdown(30s);
    if (!finished.isOk()) AFD_LOG_WARN("attention rank shutdown: {}", finished.message());
    bool clean = true;
    if (deployment->start_ffn_ranks) clean = fleet_.stop(20s);
    if (lost_code) {
        AFD_LOG_ERROR("afd serve stopped after losing an FFN rank");
        return *lost_code;
    }
    if (engine_code) {
        AFD_LOG_ERROR("afd serve stopped after its engine stopped serving");
        return *engine_code;
    }
    if (!clean) return core::kExitFailure;
    std::cout << "afd serve: stopped\n";
    return core::kExitOk;
}

}  // namespace

void addServeCommand(CLI::App& app, int& exit_code) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "serve", "OpenAI-compatible server (the dense engine, or an AFD attention rank with --additional-config)");
    cmd->add_option("MODEL", o->model, "model directory (as --model)");
    addAttentionModelAndDeviceFlags(*cmd, o->rank, "--weights-seed");
    cmd->add_option("--tokenizer", o->tokenizer_file, "tokenizer.json (default: the model directory's)");
    cmd->add_option("--host", o->host, "address to bind")->default_val("127.0.0.1");
    cmd->add_option("--port", o->port, "port to bind (0: any free port)")
        ->default_val(8000)
        ->check(CLI::Range(0, 65535));
    cmd->add_option("--served-model-name", o->served_model_name, "the model's name in the API (default: MODEL's)");
    cmd->add_option("--api-threads", o->api_threads, "HTTP worker threads (each open stream holds one)")
        ->check(CLI::NonNegativeNumber);
    addEngineLimitFlags(*cmd, o->rank);
    addAfdFlags(*cmd, o->rank);
    cmd->add_option("--ffn-device", o->ffn_device, "cpu | cuda for the FFN ranks afd serve starts (default: --device)");
    cmd->add_option("--ffn-device-ids", o->ffn_device_ids, "GPUs of the FFN ranks, by FFN rank (e.g. 1,2)");
    cmd->add_option("--run-dir", o->run_dir, "the FFN ranks' logs and status files (default: a temporary directory)");
    cmd->add_option("--port-file", o->port_file, "write the bound port here once serving (with --port 0)");
    cmd->add_option("--startup-timeout", o->startup_timeout_s, "seconds for the FFN ranks to start")->default_val(600);
    cmd->add_flag("--verbose", o->verbose, "the FFN ranks log to this terminal at info level");
    cmd->callback([o, &exit_code] {
        Serve serve(*o);
        exit_code = serve.run();
    });
}

}  // namespace afd::cli
