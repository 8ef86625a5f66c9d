#include "cli/ffn_fleet.h"

#include <fmt/format.h>

#include <charconv>
#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/exit_codes.h"
#include "core/logging.h"
#include "http/http_client.h"
#include "transport/afd_config.h"
#include "transport/socket.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

core::Status launchDefaults(json& afd) {
    const auto parsed = transport::AfdConfig::fromJson(afd.dump(), transport::Role::kAttention, "--additional-config");
    const bool p2p = parsed.isOk() && !parsed->compute_gate_on_attention;
    if (!afd.contains("num_attention_ranks") && !afd.contains("num_ffn_ranks") && !p2p) {
        afd["num_attention_ranks"] = 1;
        afd["num_ffn_ranks"] = 2;
    }
    if (!afd.contains("port") && !afd.contains("afd_port")) {
        AFD_ASSIGN_OR_RETURN(int port, transport::pickServerPort("127.0.0.1"));  // FFN rank 0 binds it
        afd["port"] = port;
    }
    return core::Status::ok();
}

std::string logTail(const std::string& path, size_t lines) {
    const std::string text = readFile(path);
    // Scans back over `lines` + 1 newlines (the text's own last one included); the tail starts after the last found.
    size_t pos = text.size();
    for (size_t n = 0; n <= lines; ++n) {
        if (pos == 0) return text;
        pos = text.rfind('\n', pos - 1);
        if (pos == std::string::npos) return text;
    }
    return text.substr(pos + 1);
}

std::string describeExit(int code) {
    if (code <= 128) return fmt::format("exited with code {}", code);
    const int signal = code - 128;
    const char* name = sigabbrev_np(signal);
    return name != nullptr ? fmt::format("was killed by signal {} (SIG{})", signal, name)
                           : fmt::format("was killed by signal {}", signal);
}

std::string childFailureReport(const std::string& name, int code, const std::string& while_doing,
                               const std::string& log_path) {
    const std::string tail = logTail(log_path, 15);
    if (tail.find_first_not_of(" \n") == std::string::npos) {
        return fmt::format("{} {} while {}; its log ({}) is empty", name, describeExit(code), while_doing, log_path);
    }
    return fmt::format("{} {} while {}; last lines of its log ({}):\n{}", name, describeExit(code), while_doing,
                       log_path, tail);
}

core::Result<FfnFleet> FfnFleet::spawn(const FfnFleetSpec& spec) {
    FfnFleet fleet;
    for (int k = 0; k < spec.num_ffn_ranks; ++k) {
        json cfg = {{"afd", spec.afd}};
        cfg["afd"]["role"] = "ffn";
        FfnRankProcess r;
        r.name = fmt::format("ffn rank {}", k);
        r.log_path = fmt::format("{}/ffn{}.log", spec.run_dir, k);
        r.port_file = fmt::format("{}/ffn{}.port", spec.run_dir, k);
        r.status_file = fmt::format("{}/ffn{}.status.json", spec.run_dir, k);
        core::ChildProcess::Spec child;
        child.argv = {spec.binary,           "--log-level",   spec.log_level, "ffn", spec.model_dir,
                      "--additional-config", cfg.dump(),      "--admin-port", "0",   "--admin-port-file",
                      r.port_file,           "--status-file", r.status_file};
        // The launcher's ranks live for its one job: after it they wait to be stopped (waitForReady counts on it).
        child.argv.insert(child.argv.end(), {"--serve-sessions", "once"});
        for (const auto& arg : spec.device_args) child.argv.push_back(arg);
        child.env = {{"RANK", std::to_string(k)},
                     {"WORLD_SIZE", std::to_string(spec.num_ffn_ranks)},
                     {"LOCAL_RANK", std::to_string(k)}};
        if (!spec.num_threads_env.empty()) child.env.emplace_back("AFD_NUM_THREADS", spec.num_threads_env);
        child.env.insert(child.env.end(), spec.env.begin(), spec.env.end());
        child.stderr_path = spec.inherit_stderr ? "" : r.log_path;
        auto process = core::ChildProcess::spawn(child);
        if (!process.isOk()) return core::ioError("cannot start {}: {}", r.name, process.status().message());
        r.process = std::move(process).value();
        fleet.ranks_.push_back(std::move(r));
    }
    return fleet;
}

core::Status FfnFleet::checkRunning(const std::string& while_doing) {
    for (auto& r : ranks_) {
        if (r.exit_code) continue;
        if (auto code = r.process.poll()) {
            r.exit_code = code;
            return core::makeStatus(core::StatusCode::kPeerLost, "{}",
                                    childFailureReport(r.name, *code, while_doing, r.log_path));
        }
    }
    return core::Status::ok();
}

core::Status FfnFleet::waitForAdminPorts(std::chrono::steady_clock::time_point deadline,
                                         const std::atomic<bool>& interrupted) {
    for (auto& r : ranks_) {
        while (true) {
            if (interrupted) return core::makeStatus(core::StatusCode::kCancelled, "interrupted");
            if (auto s = checkRunning("starting"); !s.isOk()) return s;
            const std::string text = readFile(r.port_file);
            if (!text.empty()) {
                int port = 0;
                auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
                if (ec != std::errc() || port <= 0) {
                    return core::internalError("{} wrote {:?} to {}: not a port", r.name, text, r.port_file);
                }
                r.admin_port = port;
                break;
            }
            if (std::chrono::steady_clock::now() > deadline) {
                return core::timeoutError("{} did not start its admin server before the timeout (log: {})", r.name,
                                          r.log_path);
            }
            std::this_thread::sleep_for(20ms);
        }
    }
    return core::Status::ok();
}

core::Status FfnFleet::waitForReady(std::chrono::steady_clock::time_point deadline,
                                    const std::atomic<bool>& interrupted,
                                    const std::function<core::Status()>& other_failed) {
    for (auto& r : ranks_) {
        while (true) {
            if (interrupted) return core::makeStatus(core::StatusCode::kCancelled, "interrupted");
            if (other_failed) {
                if (auto s = other_failed(); !s.isOk()) return s;
            }
            auto reply = http::httpRequest("127.0.0.1", r.admin_port, "GET", "/ready", "", 2s);
            // A rank whose session already ended (a very short job) was ready before.
            if (reply.isOk() && (reply->status == 200 || reply->body.find("session_ended") != std::string::npos)) break;
            if (auto s = checkRunning("the FFN ranks were getting ready"); !s.isOk()) return s;
            if (std::chrono::steady_clock::now() > deadline) {
                return core::timeoutError("{} never became ready (log: {})", r.name, r.log_path);
            }
            std::this_thread::sleep_for(20ms);
        }
    }
    return core::Status::ok();
}

json FfnFleet::status(size_t rank) const {
    auto reply = http::httpRequest("127.0.0.1", ranks_.at(rank).admin_port, "GET", "/status", "", 5s);
    if (!reply.isOk() || reply->status != 200) return json::object();
    json j = json::parse(reply->body, nullptr, false);
    return j.is_discarded() ? json::object() : j;
}

bool FfnFleet::stop(std::chrono::milliseconds timeout) {
    bool clean = true;
    for (auto& r : ranks_) {
        if (r.exit_code || r.admin_port == 0) continue;
        auto reply = http::httpRequest("127.0.0.1", r.admin_port, "POST", "/stop", "", 5s);
        if (!reply.isOk()) AFD_LOG_WARN("{}: POST /stop failed: {}", r.name, reply.status().message());
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& r : ranks_) {
        if (!r.exit_code) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            r.exit_code = r.process.wait(std::max(left, std::chrono::milliseconds(0)));
        }
        if (!r.exit_code) {
            AFD_LOG_ERROR("{} did not exit within {} ms of POST /stop; terminating it", r.name, timeout.count());
            r.exit_code = r.process.terminate(1s);
        }
        const json status = json::parse(readFile(r.status_file), nullptr, false);
        const bool released = !status.is_discarded() && status.value("resources_released", false);
        if (*r.exit_code != 0 || !released) {
            clean = false;
            AFD_LOG_ERROR("{} exited with code {} (resources released: {}); log {}", r.name, *r.exit_code, released,
                          r.log_path);
        }
    }
    return clean;
}

void FfnFleet::terminate(std::chrono::milliseconds grace) {
    for (auto& r : ranks_) {
        if (!r.exit_code) r.process.signal(SIGTERM);
    }
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& r : ranks_) {
        if (r.exit_code) continue;
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        r.exit_code = r.process.wait(std::max(left, std::chrono::milliseconds(0)));
        if (!r.exit_code) r.exit_code = r.process.terminate(1s);
    }
}

int FfnFleet::failedRankExitCode() const {
    for (const auto& r : ranks_) {
        if (r.exit_code && *r.exit_code != 0) return core::exitCodeForChild(*r.exit_code);
    }
    return core::kExitPeerLost;
}

std::vector<int> FfnFleet::adminPorts() const {
    std::vector<int> ports;
    for (const auto& r : ranks_) ports.push_back(r.admin_port);
    return ports;
}

}  // namespace afd::cli
