#include "cli/mps_daemon.h"

#include <fmt/format.h>

#include <signal.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "core/child_process.h"
#include "core/logging.h"
#include "core/status.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kDefaultPipeDirectory = "/tmp/nvidia-mps";  // the tool's own default
constexpr const char* kPidFileName = "nvidia-cuda-mps-control.pid";

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(path, ec);
}

// `name` as execvp would find it on PATH (an empty entry is the current directory); empty when it is not there.
std::string findOnPath(const std::string& name) {
    const char* path = std::getenv("PATH");
    const std::string dirs = path != nullptr ? path : "";
    for (size_t pos = 0; pos <= dirs.size();) {
        const size_t colon = std::min(dirs.find(':', pos), dirs.size());
        const std::string dir = colon == pos ? "." : dirs.substr(pos, colon - pos);
        const std::string candidate = dir + "/" + name;
        std::error_code ec;
        if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
            return fs::absolute(candidate, ec).string();
        }
        pos = colon + 1;
    }
    return "";
}

// The fields of /proc/<pid>/stat after the command name: state first, then the parent's pid.
std::optional<std::string> statTail(pid_t pid) {
    const std::string stat = readFile(fmt::format("/proc/{}/stat", pid));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
    return stat.substr(paren + 2);
}

// Whether `pid` runs (a zombie that nobody reaps yet counts as gone).
bool processAlive(pid_t pid) {
    if (pid <= 0) return false;
    const auto tail = statTail(pid);
    return tail && !tail->empty() && (*tail)[0] != 'Z' && (*tail)[0] != 'X';
}

// The processes whose parent is `pid` (the MPS servers a control daemon started).
std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> children;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const pid_t child = static_cast<pid_t>(std::stol(name));
        const auto tail = statTail(child);
        if (!tail) continue;
        const size_t space = tail->find(' ');
        if (space != std::string::npos && std::atol(tail->c_str() + space + 1) == pid) children.push_back(child);
    }
    return children;
}

// The MPS processes (control daemon, servers) that run with `pipe_dir` as their CUDA_MPS_PIPE_DIRECTORY: the servers
// a daemon starts inherit its environment, whoever their parent is by then.
std::vector<pid_t> mpsProcessesOf(const std::string& pipe_dir) {
    std::vector<pid_t> found;
    const std::string needle = "CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string comm = readFile(entry.path().string() + "/comm");
        if (comm.rfind("nvidia-cuda-mps", 0) != 0) continue;
        const std::string environ = readFile(entry.path().string() + "/environ");
        for (size_t at = 0; at < environ.size();) {
            const size_t end = std::min(environ.find('\0', at), environ.size());
            if (environ.compare(at, end - at, needle) == 0) {
                found.push_back(static_cast<pid_t>(std::stol(name)));
                break;
            }
            at = end + 1;
        }
    }
    return found;
}

// The daemon's pid from the file it keeps in its pipe directory; 0 when there is none.
pid_t readPidFile(const std::string& pipe_dir) {
    const long pid = std::atol(readFile(pipe_dir + "/" + kPidFileName).c_str());
    return pid > 0 ? static_cast<pid_t>(pid) : 0;
}

// Waits up to `timeout` until none of `pids` runs; true when none does.
bool waitGone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::any_of(pids.begin(), pids.end(), processAlive)) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(10ms);
    }
    return true;
}

// SIGTERM to every one of `pids` still running, a second of grace, then SIGKILL.
void killProcesses(const std::vector<pid_t>& pids) {
    for (const pid_t pid : pids) {
        if (processAlive(pid)) ::kill(pid, SIGTERM);
    }
    if (waitGone(pids, 1s)) return;
    for (const pid_t pid : pids) {
        if (processAlive(pid)) ::kill(pid, SIGKILL);
    }
    waitGone(pids, 1s);
}

// What a command printed (stdout, then stderr), on one line, for messages.
std::string outputOf(const std::string& stem) {
    std::string text = readFile(stem + ".out") + readFile(stem + ".err");
    std::replace(text.begin(), text.end(), '\n', ' ');
    while (!text.empty() && text.back() == ' ') text.pop_back();
    if (text.size() > 300) text = text.substr(0, 300) + "…";
    return text.empty() ? "no output" : text;
}

// One control command (`echo <command> | tool`) with `env` added; its output goes to <stem>.out / <stem>.err. The
// exit code, or an error when it cannot start or does not end within `timeout` (then it is killed).
core::Result<int> runControl(const std::string& tool, const std::string& command, const Env& env,
                             const std::string& stem, std::chrono::milliseconds timeout) {
    core::ChildProcess::Spec spec;
    // exec: the tool itself is the child, so a timeout kills it and nothing is left behind.
    spec.argv = {"/bin/sh", "-c", "exec \"$0\" <<'AFD_MPS_COMMAND'\n" + command + "\nAFD_MPS_COMMAND\n", tool};
    spec.env = env;
    spec.stdout_path = stem + ".out";
    spec.stderr_path = stem + ".err";
    auto child = core::ChildProcess::spawn(spec);
    if (!child.isOk()) return child.status();
    if (auto code = child->wait(timeout)) return *code;
    child->terminate(1s);
    return core::timeoutError("`echo {} | {}` did not answer within {} ms", command, tool, timeout.count());
}

std::string gpuList(const std::vector<int>& gpus) { return fmt::format("{}", fmt::join(gpus, ",")); }

}  // namespace

std::vector<int> gpusSharedByRanks(const std::vector<int>& attention_gpus, const std::vector<int>& ffn_gpus) {
    std::map<int, int> ranks_on;
    for (const int gpu : attention_gpus) ++ranks_on[gpu];
    for (const int gpu : ffn_gpus) ++ranks_on[gpu];
    std::vector<int> shared;
    for (const auto& [gpu, count] : ranks_on) {
        if (count >= 2) shared.push_back(gpu);
    }
    return shared;
}

void warnSharedGpusTimeSlice(const std::vector<int>& gpus, std::string_view why) {
    AFD_LOG_WARN(
        "GPU(s) {} run two or more ranks of this deployment without an MPS control daemon ({}): their processes' CUDA "
        "contexts time-slice, about 4.5 ms per hand-off between them (measured on an H200) against about 1.7 µs "
        "under MPS",
        gpuList(gpus), why);
}

MpsDaemon MpsDaemon::ensure(const MpsOptions& options) {
    MpsDaemon daemon;
    daemon.dir_ = options.dir;
    daemon.command_timeout_ = options.command_timeout;
    std::error_code ec;
    fs::create_directories(options.dir, ec);
    if (ec) {
        warnSharedGpusTimeSlice(options.shared_gpus, fmt::format("cannot create {}: {}", options.dir, ec.message()));
        return daemon;
    }
    daemon.tool_ = findOnPath(options.tool);

    const char* inherited = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    const std::string running_dir = inherited != nullptr && *inherited != '\0' ? inherited : kDefaultPipeDirectory;
    if (!daemon.tool_.empty() && exists(running_dir + "/control")) {
        const std::string stem = options.dir + "/mps-probe";
        const auto code = runControl(daemon.tool_, "get_server_list", {}, stem, options.command_timeout);
        if (code.isOk() && *code == 0) {
            daemon.kind_ = Kind::kRunning;
            daemon.pipe_dir_ = running_dir;
            AFD_LOG_INFO(
                "GPU(s) {} shared by ranks: using the MPS control daemon already running (pipe directory {}); "
                "it is left running",
                gpuList(options.shared_gpus), running_dir);
            return daemon;
        }
        AFD_LOG_INFO(
            "the MPS pipe directory {} has a control pipe, but get_server_list {}: starting a daemon of "
            "this launch",
            running_dir,
            code.isOk() ? fmt::format("exited with code {} ({})", *code, outputOf(stem)) : code.status().message());
    }
    if (daemon.tool_.empty()) {
        warnSharedGpusTimeSlice(options.shared_gpus, options.tool + " is not on PATH");
        return daemon;
    }
    if (auto started = daemon.start(options); !started.isOk()) {
        warnSharedGpusTimeSlice(options.shared_gpus, started.message());
        return daemon;
    }
    return daemon;
}

core::Status MpsDaemon::start(const MpsOptions& options) {
    const std::string pipe = dir_ + "/pipe";
    const std::string log = dir_ + "/log";
    // The daemon's sockets live in the pipe directory; their paths must fit a sockaddr_un.
    constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
    if (pipe.size() + std::string_view("/control_privileged").size() > kMaxSocketPath) {
        return core::invalidArgument("its pipe directory {} is too long for a Unix socket path ({} characters at most)",
                                     pipe, kMaxSocketPath - std::string_view("/control_privileged").size());
    }
    std::error_code ec;
    fs::create_directories(pipe, ec);
    if (!ec) fs::create_directories(log, ec);
    if (ec) return core::ioError("cannot create {}: {}", log, ec.message());
    // A directory the user reuses (--run-dir) may hold the files of an earlier daemon: its control pipe would look
    // like this one's.
    fs::remove(pipe + "/control", ec);
    fs::remove(pipe + "/" + kPidFileName, ec);

    env_ = {{"CUDA_MPS_PIPE_DIRECTORY", pipe}, {"CUDA_MPS_LOG_DIRECTORY", log}};
    pipe_dir_ = pipe;
    const auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
    core::ChildProcess::Spec spec;
    spec.argv = {tool_, "-d"};
    spec.env = env_;
    const std::string stem = dir_ + "/mps-start";
    spec.stdout_path = stem + ".out";
    spec.stderr_path = stem + ".err";
    auto child = core::ChildProcess::spawn(spec);
    if (!child.isOk()) return child.status();
    // `-d` forks the daemon and returns.
    const auto code = child->wait(options.start_timeout);
    core::Status failed = core::Status::ok();
    if (!code) {
        child->terminate(1s);
        failed = core::timeoutError("`{} -d` did not return within {} ms", tool_, options.start_timeout.count());
    } else if (*code != 0) {
        failed = core::ioError("`{} -d` exited with code {}: {}", tool_, *code, outputOf(stem));
    } else {
        while (!exists(pipe + "/control")) {
            if (std::chrono::steady_clock::now() >= deadline) {
                failed =
                    core::timeoutError("`{} -d` returned, but its control pipe {}/control did not appear within {} ms",
                                       tool_, pipe, options.start_timeout.count());
                break;
            }
            std::this_thread::sleep_for(10ms);
        }
    }
    kind_ = Kind::kStarted;
    if (!failed.isOk()) {
        // Whatever did start (a daemon without its pipe) is not left behind; a start that failed outright left none.
        if (!processAlive(readPidFile(pipe))) kind_ = Kind::kNone;
        stop();
        env_.clear();
        pipe_dir_.clear();
        return failed;
    }
    const pid_t pid = readPidFile(pipe);
    AFD_LOG_INFO("GPU(s) {} shared by ranks: started an MPS control daemon{} with pipe directory {} and logs in {}",
                 gpuList(options.shared_gpus), pid > 0 ? fmt::format(" (pid {})", pid) : "", pipe, log);
    return core::Status::ok();
}

void MpsDaemon::stop() noexcept {
    if (kind_ != Kind::kStarted) return;
    kind_ = Kind::kNone;
    try {
        const pid_t pid = readPidFile(pipe_dir_);
        // The MPS servers it started, seen before it is told to quit (afterwards they may be orphans).
        std::vector<pid_t> processes = pid > 0 ? childrenOf(pid) : std::vector<pid_t>{};
        if (pid > 0) processes.insert(processes.begin(), pid);
        for (const pid_t server : mpsProcessesOf(pipe_dir_)) {
            if (std::find(processes.begin(), processes.end(), server) == processes.end()) processes.push_back(server);
        }
        const std::string stem = dir_ + "/mps-quit";
        const auto quit = runControl(tool_, "quit", env_, stem, command_timeout_);
        const std::string quit_result =
            quit.isOk() ? (*quit == 0 ? "" : fmt::format("quit exited with code {}: {}", *quit, outputOf(stem)))
                        : quit.status().message();
        const std::string name =
            pid > 0 ? fmt::format("the MPS control daemon (pid {})", pid) : "the MPS control daemon";
        if (pid <= 0) {
            // Without its pid file only quit's answer tells.
            if (quit_result.empty()) {
                AFD_LOG_INFO("stopped {} with pipe directory {}", name, pipe_dir_);
            } else {
                AFD_LOG_WARN("{} with pipe directory {} may still run: {}", name, pipe_dir_, quit_result);
            }
            return;
        }
        // Its servers by their environment too (a server need not be the daemon's child once it runs).
        for (const pid_t server : mpsProcessesOf(pipe_dir_)) {
            if (std::find(processes.begin(), processes.end(), server) == processes.end()) processes.push_back(server);
        }
        if (waitGone(processes, command_timeout_) && mpsProcessesOf(pipe_dir_).empty()) {
            AFD_LOG_INFO("stopped {} with pipe directory {}", name, pipe_dir_);
            return;
        }
        for (const pid_t server : childrenOf(pid)) {
            if (std::find(processes.begin(), processes.end(), server) == processes.end()) processes.push_back(server);
        }
        for (const pid_t server : mpsProcessesOf(pipe_dir_)) {
            if (std::find(processes.begin(), processes.end(), server) == processes.end()) processes.push_back(server);
        }
        AFD_LOG_WARN("{} did not exit within {} ms of quit{}; killing it and its MPS servers", name,
                     command_timeout_.count(), quit_result.empty() ? "" : " (" + quit_result + ")");
        killProcesses(processes);
        if (std::any_of(processes.begin(), processes.end(), processAlive)) {
            AFD_LOG_WARN("{} or one of its MPS servers still runs after SIGKILL", name);
        }
    } catch (const std::exception& e) {
        // Nothing throws out of a destructor; the log call itself may be what threw.
        static_cast<void>(e);
    }
}

MpsDaemon::~MpsDaemon() { stop(); }

MpsDaemon::MpsDaemon(MpsDaemon&& other) noexcept
    : kind_(std::exchange(other.kind_, Kind::kNone)),
      tool_(std::move(other.tool_)),
      dir_(std::move(other.dir_)),
      pipe_dir_(std::move(other.pipe_dir_)),
      env_(std::move(other.env_)),
      command_timeout_(other.command_timeout_) {}

MpsDaemon& MpsDaemon::operator=(MpsDaemon&& other) noexcept {
    if (this != &other) {
        stop();
        kind_ = std::exchange(other.kind_, Kind::kNone);
        tool_ = std::move(other.tool_);
        dir_ = std::move(other.dir_);
        pipe_dir_ = std::move(other.pipe_dir_);
        env_ = std::move(other.env_);
        command_timeout_ = other.command_timeout_;
    }
    return *this;
}

std::string_view MpsDaemon::kindName() const {
    switch (kind_) {
        case Kind::kNone:
            return "none";
        case Kind::kRunning:
            return "running";
        case Kind::kStarted:
            return "started";
    }
    return "none";
}

}  // namespace afd::cli
