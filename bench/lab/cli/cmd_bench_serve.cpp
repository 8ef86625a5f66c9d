// `afd bench serve`: a load client against an OpenAI-compatible server (afd serve, vLLM, SGLang), as `vllm bench
// serve` is: random prompts sent as streaming requests at Poisson, gamma or all-at-once arrivals under an optional
// concurrency cap, then the summary of TTFT, TPOT, ITL and end-to-end latency and the throughputs (lab/serve/).
// Flags are checked (exit 2) before any request. Exit 1 when every request failed (or the model could not be
// found), 130 after Ctrl-C (the partial summary is printed first), else 0.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/signal_watcher.h"
#include "http/http_client.h"
#include "lab/cli/bench_commands.h"
#include "lab/serve/load_run.h"
#include "lab/serve/openai_stream.h"
#include "lab/serve/random_prompts.h"
#include "lab/serve/serve_report.h"

namespace afd::cli {
namespace {

constexpr const char* kCommand = "bench serve";
constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it

struct BenchServeFlags {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string endpoint = "/v1/completions";
    std::string model;
    std::string request_rate = "inf";
    double burstiness = 1.0;
    int64_t max_concurrency = 0;
    uint64_t seed = 0;
    std::string dataset = "random";
    std::string prompt_format = "ids";
    lab::RandomPromptOptions prompts;
    bool ignore_eos = false;
    bool no_token_ids = false;
    double temperature = 0.0;
    std::string extra_body;
    std::string result_json;
    double timeout_s = 600;
    std::vector<std::string> percentile_metrics = lab::kLatencyMetrics;
    std::vector<double> metric_percentiles = {50, 90, 99};
};

// --request-rate: "inf" or a positive number of requests per second.
bool parseRate(const std::string& text, double& rate) {
    if (text == "inf" || text == "infinity") {
        rate = std::numeric_limits<double>::infinity();
        return true;
    }
    try {
        size_t used = 0;
        rate = std::stod(text, &used);
        if (used == text.size() && std::isfinite(rate) && rate > 0) return true;
    } catch (const std::exception&) {
    }
    AFD_LOG_ERROR("{}: --request-rate: {} must be a positive number or inf", kCommand, text);
    return false;
}

bool checkFlags(const BenchServeFlags& f) {
    for (const double p : f.metric_percentiles) {
        if (!(p >= 0 && p <= 100)) {
            AFD_LOG_ERROR("{}: --metric-percentiles: {} must be in [0, 100]", kCommand, p);
            return false;
        }
    }
    return true;
}

// --model, else the first model GET /v1/models names.
core::Result<std::string> servedModel(const BenchServeFlags& f) {
    if (!f.model.empty()) return f.model;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::min(f.timeout_s, 30.0) * 1000));
    auto reply = http::httpRequest(f.host, f.port, "GET", "/v1/models", "", timeout);
    if (!reply.isOk()) return reply.status();
    if (reply->status != 200) {
        return core::ioError("GET /v1/models answered {}: {}", reply->status, lab::errorMessage(reply->body));
    }
    return lab::firstModel(reply->body);
}

int runBenchServe(BenchServeFlags& f) {
    double rate = 0;
    if (!checkFlags(f) || !parseRate(f.request_rate, rate)) return core::kExitBadConfig;
    const bool chat = f.endpoint == "/v1/chat/completions";
    f.prompts.text = chat || f.prompt_format == "text";

    // Before any thread: SIGINT and SIGTERM go to the watcher from here on.
    std::atomic<bool> interrupted{false};
    auto signals = core::SignalWatcher::create([&interrupted](int) { interrupted = true; });
    if (!signals.isOk()) {
        AFD_LOG_ERROR("{}: {}", kCommand, signals.status().message());
        return core::kExitFailure;
    }
    const auto model = servedModel(f);
    if (!model.isOk()) {
        AFD_LOG_ERROR("{}: cannot find the served model on {}:{} (pass --model): {}", kCommand, f.host, f.port,
                      model.status().message());
        return core::kExitFailure;
    }

    lab::RequestBodyOptions body_options;
    body_options.endpoint = chat ? lab::BenchEndpoint::kChatCompletions : lab::BenchEndpoint::kCompletions;
    body_options.model = *model;
    body_options.temperature = f.temperature;
    body_options.ignore_eos = f.ignore_eos;
    body_options.return_token_ids = !f.no_token_ids;
    body_options.extra_body = f.extra_body;
    const std::vector<lab::BenchPrompt> prompts = lab::randomPrompts(f.prompts);
    std::vector<std::string> bodies;
    bodies.reserve(prompts.size());
    for (const auto& prompt : prompts) {
        auto body = lab::requestBody(prompt, body_options);
        if (!body.isOk()) {
            AFD_LOG_ERROR("{}: {}", kCommand, body.status().message());
            return core::kExitBadConfig;
        }
        bodies.push_back(std::move(*body));
    }

    lab::LoadRunOptions options;
    options.host = f.host;
    options.port = f.port;
    options.endpoint_path = f.endpoint;
    options.endpoint = body_options.endpoint;
    options.request_rate = rate;
    options.burstiness = f.burstiness;
    options.max_concurrency = f.max_concurrency;
    options.seed = f.seed;
    options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
    options.interrupt = &interrupted;
    fmt::print("{}: {} prompts to http://{}:{}{} (model {}), request rate {}, burstiness {}, max concurrency {}\n",
               kCommand, prompts.size(), f.host, f.port, f.endpoint, *model, f.request_rate, f.burstiness,
               f.max_concurrency > 0 ? std::to_string(f.max_concurrency) : "none");
    std::fflush(stdout);
    const lab::LoadRunResult run = lab::runLoad(bodies, prompts, options);
    const lab::ServeSummary summary = lab::summarize(run, f.metric_percentiles);
    fmt::print("{}", lab::formatSummary(summary, f.percentile_metrics, f.metric_percentiles));
    std::fflush(stdout);

    int exit_code = core::kExitOk;
    if (!f.result_json.empty()) {
        lab::ServeRunInfo info;
        info.base_url = fmt::format("http://{}:{}{}", f.host, f.port, f.endpoint);
        info.model = *model;
        info.num_prompts = static_cast<int64_t>(prompts.size());
        info.request_rate = rate;
        info.burstiness = f.burstiness;
        info.max_concurrency = f.max_concurrency;
        std::ofstream out(f.result_json);
        out << lab::resultJson(info, summary, run, f.metric_percentiles);
        if (!out.flush()) {
            AFD_LOG_ERROR("{}: cannot write {}", kCommand, f.result_json);
            exit_code = core::kExitFailure;
        }
    }
    if (summary.interrupted) {
        AFD_LOG_WARN("{}: interrupted: the summary covers the {} requests that finished", kCommand,
                     summary.completed + summary.failed);
        return kExitInterrupted;
    }
    if (summary.completed == 0 && summary.failed > 0) {
        AFD_LOG_ERROR("{}: every request failed; the first: {}", kCommand, summary.first_error);
        return core::kExitFailure;
    }
    return exit_code;
}

}  // namespace

void addBenchServeCommand(CLI::App& bench, int& exit_code) {
    CLI::App* serve = bench.add_subcommand(
        "serve",
        "load an OpenAI-compatible server with streaming requests and report TTFT, TPOT, ITL, latency and "
        "throughput, as vllm bench serve does");
    auto f = std::make_shared<BenchServeFlags>();
    serve->add_option("--host", f->host, "the server's address")->capture_default_str();
    serve->add_option("--port", f->port, "the server's port")->capture_default_str()->check(CLI::Range(1, 65535));
    serve->add_option("--endpoint", f->endpoint, "the API route")
        ->capture_default_str()
        ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}));
    serve->add_option("--model", f->model, "the model name sent (default: the first of GET /v1/models)");
    serve->add_option("--num-prompts", f->prompts.num_prompts, "requests to send")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    serve->add_option("--request-rate", f->request_rate, "arrivals per second; inf sends every request at once")
        ->capture_default_str();
    serve
        ->add_option("--burstiness", f->burstiness,
                     "gamma shape of the gaps between arrivals: 1 is Poisson, below 1 burstier, above 1 steadier")
        ->capture_default_str()
        ->check(CLI::Range(1e-3, 1e3));
    serve
        ->add_option("--max-concurrency", f->max_concurrency,
                     fmt::format("requests in flight at most (0: no cap but {})", lab::kMaxClientThreads))
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, lab::kMaxClientThreads));
    serve->add_option("--seed", f->seed, "of the prompts and the arrival times")->capture_default_str();
    serve->add_option("--dataset", f->dataset, "the prompt source")
        ->capture_default_str()
        ->check(CLI::IsMember({"random"}));
    serve->add_option("--random-input-len", f->prompts.input_len, "prompt tokens (the centre of the range)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    serve->add_option("--random-output-len", f->prompts.output_len, "max_tokens (the centre of the range)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    serve
        ->add_option("--random-range-ratio", f->prompts.range_ratio,
                     "lengths are drawn uniformly from [len * (1 - r), len * (1 + r)]")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 0.999));
    serve
        ->add_option("--random-vocab-size", f->prompts.vocab_size,
                     "token-id prompts draw ids from [0, N): at most the model's vocabulary")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{2}, int64_t{1} << 31));
    serve
        ->add_option("--prompt-format", f->prompt_format,
                     "ids: token-id prompts of exact length (completions only); text: words, counted by the server's "
                     "tokenizer (chat always sends text)")
        ->capture_default_str()
        ->check(CLI::IsMember({"ids", "text"}));
    serve->add_flag("--ignore-eos", f->ignore_eos, "send ignore_eos, so that every request generates max_tokens");
    serve->add_flag("--no-return-token-ids", f->no_token_ids,
                    "do not send return_token_ids (for servers that refuse it; chunks then count one token each "
                    "unless usage says otherwise)");
    serve->add_option("--temperature", f->temperature, "sampling temperature")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 2.0));
    serve->add_option("--extra-body", f->extra_body, "a JSON object whose fields are added to every request body");
    serve->add_option("--result-json", f->result_json, "write every figure and per-request records to this file");
    serve->add_option("--timeout-s", f->timeout_s, "seconds a request may take from its send to its end")
        ->capture_default_str()
        ->check(CLI::Range(0.01, 86400.0));
    serve->add_option("--percentile-metrics", f->percentile_metrics, "metrics to report: ttft, tpot, itl, e2el")
        ->delimiter(',')
        ->check(CLI::IsMember(lab::kLatencyMetrics));
    serve->add_option("--metric-percentiles", f->metric_percentiles, "percentiles to report, e.g. 50,90,99")
        ->delimiter(',');
    serve->callback([f, &exit_code] {
        try {
            exit_code = runBenchServe(*f);
        } catch (const std::exception& e) {
            AFD_LOG_ERROR("{}: {}", kCommand, e.what());
            exit_code = core::kExitFailure;
        }
    });
}

}  // namespace afd::cli
