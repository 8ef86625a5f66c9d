#include "common/afd_processes.h"

#include <fmt/format.h>

#include <fstream>
#include <thread>

#include "http/http_client.h"
#include "transport/socket.h"

namespace afd::testing {

int freePort() {
    auto port = transport::pickServerPort("127.0.0.1");
    return port.isOk() ? *port : 0;
}

std::string afdConfigJson(int num_attention, int num_ffn, bool m2n, int port, const std::string& extra) {
    return fmt::format(R"({{"afd":{{"num_attention_ranks":{},"num_ffn_ranks":{},"compute_gate_on_attention":{},)"
                       R"("port":{},"connect_timeout_s":30,"step_timeout_s":20{}{}}}}})",
                       num_attention, num_ffn, m2n ? "true" : "false", port, extra.empty() ? "" : ",", extra);
}

std::string readText(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

FfnProcess startFfn(const std::string& dir, const std::string& model, const std::string& config, int rank, int world,
                    const std::vector<std::string>& extra_args,
                    const std::vector<std::pair<std::string, std::string>>& extra_env) {
    FfnProcess f;
    f.log_path = fmt::format("{}/ffn{}.log", dir, rank);
    f.status_path = fmt::format("{}/ffn{}.status.json", dir, rank);
    f.port_path = fmt::format("{}/ffn{}.port", dir, rank);
    core::ChildProcess::Spec spec;
    spec.argv = {AFD_BINARY,          "ffn",       model,           "--additional-config", config, "--admin-port", "0",
                 "--admin-port-file", f.port_path, "--status-file", f.status_path};
    spec.argv.insert(spec.argv.end(), extra_args.begin(), extra_args.end());
    spec.env = {{"RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(world)},
                {"LOCAL_RANK", std::to_string(rank)},
                {"AFD_NUM_THREADS", "1"}};
    spec.env.insert(spec.env.end(), extra_env.begin(), extra_env.end());
    spec.stderr_path = f.log_path;
    auto child = core::ChildProcess::spawn(spec);
    if (child.isOk()) f.process = std::move(child).value();
    return f;
}

int waitAdminPort(FfnProcess& ffn, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string text = readText(ffn.port_path);
        if (!text.empty()) return ffn.admin_port = std::stoi(text);
        if (ffn.process.poll()) return 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
}

AttentionProcess startAttention(const std::string& dir, const std::string& model, const std::string& config, int rank,
                                const std::vector<std::string>& prompts, int max_tokens,
                                const std::vector<std::string>& extra_args) {
    AttentionProcess a;
    a.out_path = fmt::format("{}/attention{}.json", dir, rank);
    a.log_path = fmt::format("{}/attention{}.log", dir, rank);
    core::ChildProcess::Spec spec;
    spec.argv = {AFD_BINARY,
                 "generate",
                 "--model",
                 model,
                 "--additional-config",
                 config,
                 "--attention-rank",
                 std::to_string(rank),
                 "--max-tokens",
                 std::to_string(max_tokens),
                 "--json"};
    for (const auto& p : prompts) {
        spec.argv.push_back("--prompt-ids");
        spec.argv.push_back(p);
    }
    for (const auto& arg : extra_args) spec.argv.push_back(arg);
    spec.env = {{"AFD_NUM_THREADS", "1"}};
    spec.stdout_path = a.out_path;
    spec.stderr_path = a.log_path;
    auto child = core::ChildProcess::spawn(spec);
    if (child.isOk()) a.process = std::move(child).value();
    return a;
}

std::optional<std::string> httpGet(int port, const std::string& path) {
    auto reply = http::httpRequest("127.0.0.1", port, "GET", path, "", std::chrono::seconds(5));
    if (!reply.isOk()) return std::nullopt;
    return reply->body;
}

bool httpPostStop(int port) {
    auto reply = http::httpRequest("127.0.0.1", port, "POST", "/stop", "", std::chrono::seconds(5));
    return reply.isOk() && reply->status == 200;
}

}  // namespace afd::testing
