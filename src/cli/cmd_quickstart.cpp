// `afd quickstart`: the README's main job. Writes the embedded default model (the "tiny-chat" preset: a generated tiny
// model with Qwen3's vocabulary, beside the Qwen3 tokenizer's files), starts `afd serve` on it (AFD over loopback:
// m2n, 1 attention rank and 2 FFN ranks on the CPU unless --additional-config says otherwise), sends one chat request
// and one streaming completion through the OpenAI API, prints them and the metrics that matter, then stops the
// server with SIGTERM and checks that every rank exited cleanly.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/ffn_fleet.h"
#include "cli/run_dir.h"
#include "core/child_process.h"
#include "core/exit_codes.h"
#include "core/logging.h"
#include "core/prometheus_text.h"
#include "http/http_client.h"
#include "model/model_config.h"
#include "model/synthetic.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct QuickstartOptions {
    std::string tokenizer_dir;
    std::string additional_config = R"({"afd":{}})";
    bool dense = false;
    std::string device = "cpu";
    int64_t max_tokens = 24;
    std::string question = "In one sentence, what does attention-FFN disaggregation do?";
    std::string prompt = "Mixture-of-experts models route each token to";
    std::string run_dir;
    int64_t timeout_s = 300;
};

int fail(int code, const std::string& message) {
    AFD_LOG_ERROR("{}", message);
    return code;
}

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Quickstart {
public:
    explicit Quickstart(QuickstartOptions options) : options_(std::move(options)) {}
    // The exit code (core/exit_codes.h). A run that fails after afd serve started keeps the run directory (the model,
    // the logs) and names it; any other run removes the temporary one.
    int run();

private:
    int runSteps();
    core::Status writeModel(const std::string& model_dir);
    core::Result<int> startServer(const std::string& model_dir);
    core::Status chat(http::HttpClient& client);
    core::Status streamCompletion(http::HttpClient& client);
    core::Status printMetrics(http::HttpClient& client);
    int stopServer();

    QuickstartOptions options_;
    RunDir run_dir_;  // NOTE: declared before the server, which writes into it
    core::ChildProcess server_;
    bool server_started_ = false;
    std::optional<int> server_exit_;  // afd serve's exit code once it has exited
    std::string log_path_;
    std::string model_name_ = "tiny-chat";
};

core::Status Quickstart::writeModel(const std::string& model_dir) {
    namespace fs = std::filesystem;
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
        if (!fs::exists(fs::path(options_.tokenizer_dir) / file)) {
            return core::invalidArgument(
                "--tokenizer-dir {}: no {} (scripts/setup.sh fetches the Qwen3 tokenizer into third_party/tokenizer)",
                options_.tokenizer_dir, file);
        }
    }
    AFD_ASSIGN_OR_RETURN(const model::ModelConfig config, model::ModelConfig::preset("tiny-chat"));
    AFD_RETURN_IF_ERROR(model::writeSyntheticCheckpoint(model_dir, config, {}));
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
        std::error_code ec;
        fs::copy_file(fs::path(options_.tokenizer_dir) / file, fs::path(model_dir) / file,
                      fs::copy_options::overwrite_existing, ec);
        if (ec) return core::ioError("cannot copy {} into {}: {}", file, model_dir, ec.message());
    }
    return core::Status::ok();
}

core::Result<int> Quickstart::startServer(const std::string& model_dir) {
    const std::string port_file = run_dir_.path() + "/serve.port";
    log_path_ = run_dir_.path() + "/serve.log";
    core::ChildProcess::Spec spec;
    spec.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                 "serve",
                 model_dir,
                 "--served-model-name",
                 model_name_,
                 "--port",
                 "0",
                 "--port-file",
                 port_file,
                 "--device",
                 options_.device,
                 "--run-dir",
                 run_dir_.path() + "/ranks"};
    if (!options_.dense) {
        spec.argv.push_back("--additional-config");
        spec.argv.push_back(options_.additional_config);
    }
    spec.stdout_path = run_dir_.path() + "/serve.out";
    spec.stderr_path = log_path_;
    AFD_ASSIGN_OR_RETURN(server_, core::ChildProcess::spawn(spec));
    server_started_ = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options_.timeout_s);
    while (true) {
        if (auto code = server_.poll()) {
            server_exit_ = code;
            return core::peerLost("{}", childFailureReport("afd serve", *code, "starting", log_path_));
        }
        const std::string text = readFile(port_file);
        if (!text.empty()) return std::stoi(text);
        if (std::chrono::steady_clock::now() > deadline) {
            return core::timeoutError("afd serve did not start within {} s (log: {})", options_.timeout_s, log_path_);
        }
        std::this_thread::sleep_for(50ms);
    }
}

core::Status Quickstart::chat(http::HttpClient& client) {
    const json request = {{"model", model_name_},
                          {"messages", json::array({{{"role", "user"}, {"content", options_.question}}})},
                          {"max_tokens", options_.max_tokens},
                          {"temperature", 0}};
    std::cout << fmt::format("\n== POST /v1/chat/completions\nuser: {}\n", options_.question);
    AFD_ASSIGN_OR_RETURN(const http::HttpResponse reply, client.post("/v1/chat/completions", request.dump()));
    if (reply.status != 200) return core::internalError("chat request answered {}: {}", reply.status, reply.body);
    const json body = json::parse(reply.body, nullptr, false);
    if (body.is_discarded()) return core::internalError("chat reply is not JSON: {}", reply.body);
    const json& choice = body.at("choices").at(0);
    std::cout << fmt::format("assistant: {}\n(finish_reason {}, {} prompt + {} completion tokens)\n",
                             choice.at("message").value("content", ""), choice.value("finish_reason", "?"),
                             body.at("usage").value("prompt_tokens", 0),
                             body.at("usage").value("completion_tokens", 0));
    return core::Status::ok();
}

core::Status Quickstart::streamCompletion(http::HttpClient& client) {
    const json request = {{"model", model_name_},
                          {"prompt", options_.prompt},
                          {"max_tokens", options_.max_tokens},
                          {"temperature", 0},
                          {"stream", true},
                          {"stream_options", {{"include_usage", true}}}};
    std::cout << fmt::format("\n== POST /v1/completions (streaming)\nprompt: {}\ncompletion: ", options_.prompt)
              << std::flush;
    int chunks = 0;
    bool done = false;
    json usage;
    std::string error;
    AFD_ASSIGN_OR_RETURN(
        const http::HttpResponse reply,
        client.streamEvents("POST", "/v1/completions", request.dump(), [&](const http::SseEvent& event) {
            if (event.data == "[DONE]") {
                done = true;
                return false;
            }
            const json chunk = json::parse(event.data, nullptr, false);
            if (chunk.is_discarded()) return true;
            if (chunk.contains("error")) {
                error = chunk["error"].value("message", event.data);
                return true;
            }
            if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
            for (const auto& choice : chunk.value("choices", json::array())) {
                std::cout << choice.value("text", "") << std::flush;
                ++chunks;
            }
            return true;
        }));
    std::cout << "\n";
    if (reply.status != 200) return core::internalError("completion answered {}: {}", reply.status, reply.body);
    if (!error.empty()) return core::internalError("the stream ended with an error: {}", error);
    if (!done) return core::internalError("the stream ended without [DONE]");
    std::cout << fmt::format("({} chunks, {} prompt + {} completion tokens)\n", chunks, usage.value("prompt_tokens", 0),
                             usage.value("completion_tokens", 0));
    return core::Status::ok();
}

core::Status Quickstart::printMetrics(http::HttpClient& client) {
    AFD_ASSIGN_OR_RETURN(const http::HttpResponse reply, client.get("/metrics"));
    if (reply.status != 200) return core::internalError("GET /metrics answered {}", reply.status);
    const core::PrometheusText m = core::PrometheusText::parse(reply.body);
    auto ms = [&](const std::string& histogram) {
        const double count = m.sum(histogram + "_count");
        return count > 0 ? fmt::format("{:.2f} ms", 1e3 * m.sum(histogram + "_sum") / count) : std::string("-");
    };
    std::cout << "\n== GET /metrics (the figures that matter)\n";
    std::cout << fmt::format("requests finished            {}\n", m.sum("afd_request_success_total"));
    std::cout << fmt::format("prompt / generation tokens   {} / {}\n", m.sum("afd_prompt_tokens_total"),
                             m.sum("afd_generation_tokens_total"));
    std::cout << fmt::format("time to first token (mean)   {}\n", ms("afd_time_to_first_token_seconds"));
    std::cout << fmt::format("inter-token latency (mean)   {}\n", ms("afd_inter_token_latency_seconds"));
    std::cout << fmt::format("end-to-end latency (mean)    {}\n", ms("afd_e2e_request_latency_seconds"));
    std::cout << fmt::format("KV blocks in use             {} of {}\n", m.sum("afd_kv_blocks_used"),
                             m.sum("afd_kv_blocks_total"));
    if (!options_.dense) {
        const double a2f = m.sum("afd_layer_a2f_seconds_sum"), f2a = m.sum("afd_layer_f2a_seconds_sum");
        const double steps = m.sum("afd_engine_steps_total");
        if (steps > 0) {
            std::cout << fmt::format("A2F / F2A per step           {:.3f} / {:.3f} ms (all layers)\n",
                                     1e3 * a2f / steps, 1e3 * f2a / steps);
        }
        std::map<double, std::string, std::greater<>> busiest;
        for (const auto& series : m.series("afd_ffn_expert_tokens_total")) {
            busiest.emplace(series.value, series.label("expert"));
        }
        std::string top;
        int n = 0;
        for (const auto& [tokens, expert] : busiest) {
            if (n++ == 3) break;
            top += fmt::format("{}expert {}: {}", top.empty() ? "" : ", ", expert, tokens);
        }
        if (!top.empty()) std::cout << fmt::format("busiest experts (tokens)     {}\n", top);
    }
    return core::Status::ok();
}

int Quickstart::stopServer() {
    server_.signal(SIGTERM);
    const auto code = server_.wait(60s);
    if (!code) {
        server_.terminate(1s);
        return fail(core::kExitFailure,
                    fmt::format("afd serve did not stop within 60 s of SIGTERM (log: {})", log_path_));
    }
    if (*code != 0) {
        return fail(core::exitCodeForChild(*code), childFailureReport("afd serve", *code, "stopping", log_path_));
    }
    std::cout << "\nafd serve stopped on SIGTERM; every rank exited cleanly\n";
    return core::kExitOk;
}

int Quickstart::run() {
    int code = core::kExitInternal;
    try {
        code = runSteps();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("internal error: {}", e.what());
        if (server_started_) server_.terminate(1s);
    }
    if (code != core::kExitOk && server_started_ && !run_dir_.empty()) {
        run_dir_.keep();
        AFD_LOG_ERROR("the model and the logs are kept in {}", run_dir_.path());
    }
    return code;
}

int Quickstart::runSteps() {
    auto run_dir = RunDir::create(options_.run_dir, "afd-quickstart-");
    if (!run_dir.isOk()) return fail(core::kExitFailure, run_dir.status().message());
    run_dir_ = std::move(run_dir).value();
    const std::string model_dir = run_dir_.path() + "/model";
    if (auto s = writeModel(model_dir); !s.isOk()) return fail(core::exitCodeFor(s), s.message());
    std::cout << fmt::format(
        "afd quickstart: a generated tiny model with the Qwen3 tokenizer in {} (random weights: "
        "the text it writes is random tokens)\n",
        model_dir);
    auto port = startServer(model_dir);
    if (!port.isOk()) {
        // afd serve's own code when it exited (2 for a bad --additional-config, 3 for a lost rank).
        return fail(server_exit_ ? core::exitCodeForChild(*server_exit_) : core::kExitFailure, port.status().message());
    }
    std::cout << fmt::format("afd serve on http://127.0.0.1:{} ({}; log {})\n", *port,
                             options_.dense ? "the dense engine" : "AFD over loopback: " + options_.additional_config,
                             log_path_);
    http::HttpClientOptions client_options;
    client_options.timeout = std::chrono::seconds(options_.timeout_s);
    http::HttpClient client("127.0.0.1", *port, client_options);
    core::Status status = chat(client);
    if (status.isOk()) status = streamCompletion(client);
    if (status.isOk()) status = printMetrics(client);
    const int stopped = stopServer();
    if (!status.isOk()) return fail(stopped != core::kExitOk ? stopped : core::kExitFailure, status.message());
    return stopped;
}

}  // namespace

void addQuickstartCommand(CLI::App& app, int& exit_code) {
    auto o = std::make_shared<QuickstartOptions>();
    CLI::App* cmd = app.add_subcommand(
        "quickstart", "Serve a generated tiny model (AFD over loopback), send a chat and a streaming completion, stop");
    const char* env_dir = std::getenv("AFD_TOKENIZER_DIR");
    o->tokenizer_dir = env_dir != nullptr ? env_dir : "third_party/tokenizer";
    cmd->add_option("--tokenizer-dir", o->tokenizer_dir,
                    "directory with the Qwen3 tokenizer.json and tokenizer_config.json (default: $AFD_TOKENIZER_DIR, "
                    "else third_party/tokenizer)");
    cmd->add_option("--additional-config", o->additional_config,
                    "the AFD deployment afd serve starts (default: m2n, 1 attention rank, 2 FFN ranks)");
    cmd->add_flag("--dense", o->dense, "serve the dense engine instead (no AFD)");
    cmd->add_option("--device", o->device, "cpu | cuda")->default_val("cpu");
    cmd->add_option("--max-tokens", o->max_tokens, "tokens per reply")->default_val(24);
    cmd->add_option("--question", o->question, "the chat request's user message");
    cmd->add_option("--prompt", o->prompt, "the streaming completion's prompt");
    cmd->add_option("--run-dir", o->run_dir, "keep the model and logs here (default: a temporary directory)");
    cmd->add_option("--timeout", o->timeout_s, "seconds for start-up and for each request")->default_val(300);
    cmd->callback([o, &exit_code] {
        Quickstart quickstart(*o);
        exit_code = quickstart.run();
    });
}

}  // namespace afd::cli
