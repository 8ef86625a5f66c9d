// MpsDaemon (cli/mps_daemon.h) against a stand-in `nvidia-cuda-mps-control` on PATH: a shell script that records
// every call (argv, the command on stdin, the pipe directory) and emulates the tool: `-d` forks a "daemon" (with an
// "MPS server" child), writes its pid file and creates the control pipe; `get_server_list` answers while the daemon
// runs; `quit` stops it and removes its pid file. Files in a modes folder make it fail to start, start without a
// control pipe, or ignore quit. Also: which GPUs count as shared by ranks.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/mps_daemon.h"
#include "common/subprocess_util.h"
#include "core/logging.h"

namespace afd::cli {
namespace {

using namespace std::chrono_literals;
using afd::testing::runProcess;
using afd::testing::TempDir;
namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> linesOf(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// Whether `pid` runs (a zombie nobody has reaped yet counts as gone).
bool alive(pid_t pid) {
    if (pid <= 0) return false;
    const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

pid_t pidIn(const std::string& path) { return static_cast<pid_t>(std::atol(readFile(path).c_str())); }

// The stand-in tool. `record` and `modes` are baked in; the pipe directory comes from the environment as for the
// real tool.
std::string fakeTool(const std::string& record, const std::string& modes) {
    return R"SH(#!/bin/sh
PATH=/usr/bin:/bin
record=')SH" +
           record + R"SH('
modes=')SH" +
           modes + R"SH('
dir=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
if [ "$1" = "-d" ]; then
    echo "-d pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$record"
    if [ -e "$modes/fail_start" ]; then echo "An instance of this daemon is already running" >&2; exit 1; fi
    rm -f "$dir/server.pid"
    sh -c 'sleep 300 & echo $! > "$0/server.pid"; wait' "$dir" </dev/null >/dev/null 2>&1 &
    echo $! > "$dir/nvidia-cuda-mps-control.pid"
    while [ ! -s "$dir/server.pid" ]; do sleep 0.01; done
    [ -e "$modes/no_control" ] || : > "$dir/control"
    exit 0
fi
command=$(cat)
echo "$* $command pipe=$dir" >> "$record"
pid=$(cat "$dir/nvidia-cuda-mps-control.pid" 2>/dev/null)
if [ ! -e "$dir/control" ] || [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "Cannot find MPS control daemon process" >&2
    exit 1
fi
if [ "$command" = quit ] && [ ! -e "$modes/ignore_quit" ]; then
    kill "$(cat "$dir/server.pid")" "$pid"
    rm -f "$dir/nvidia-cuda-mps-control.pid"
fi
exit 0
)SH";
}

class MpsDaemonTest : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* name : {"PATH", "CUDA_MPS_PIPE_DIRECTORY"}) {
            const char* value = std::getenv(name);
            saved_env_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
        }
        fs::create_directories(bin_);
        fs::create_directories(modes_);
        fs::create_directories(empty_bin_);
        const std::string tool = bin_ + "/nvidia-cuda-mps-control";
        std::ofstream(tool) << fakeTool(record_, modes_);
        fs::permissions(tool, fs::perms::owner_all);
        usePath(bin_);
        // Never the machine's own daemon: the "running" one lives here, absent unless a test starts it.
        ::setenv("CUDA_MPS_PIPE_DIRECTORY", system_pipe_.c_str(), 1);
    }

    void TearDown() override {
        // Whatever a failing test left running.
        for (const std::string& pipe : {system_pipe_, options().dir + "/pipe"}) {
            for (const char* file : {"/server.pid", "/nvidia-cuda-mps-control.pid"}) {
                const pid_t pid = pidIn(pipe + file);
                if (alive(pid)) ::kill(pid, SIGKILL);
            }
        }
        for (const auto& [name, value] : saved_env_) {
            if (value) {
                ::setenv(name.c_str(), value->c_str(), 1);
            } else {
                ::unsetenv(name.c_str());
            }
        }
    }

    void usePath(const std::string& first) {
        const auto& old = saved_env_[0].second;
        ::setenv("PATH", (first + (old ? ":" + *old : "")).c_str(), 1);
    }

    MpsOptions options() const {
        MpsOptions o;
        o.dir = dir_.file("run/mps");
        o.shared_gpus = {0};
        o.start_timeout = 3s;
        o.command_timeout = 3s;
        return o;
    }

    // Starts the stand-in's daemon in the "system" pipe directory, as a user would have.
    void startSystemDaemon() {
        fs::create_directories(system_pipe_);
        ASSERT_EQ(runProcess({bin_ + "/nvidia-cuda-mps-control", "-d"}).exit_code, 0);
        ASSERT_TRUE(fs::exists(system_pipe_ + "/control"));
        ASSERT_TRUE(alive(pidIn(system_pipe_ + "/nvidia-cuda-mps-control.pid")));
    }

    size_t countRecorded(const std::string& prefix) const {
        size_t n = 0;
        for (const auto& line : linesOf(record_)) n += line.rfind(prefix, 0) == 0;
        return n;
    }

    static bool anyLineHas(const std::vector<std::string>& lines, const std::vector<std::string>& needles) {
        for (const auto& line : lines) {
            bool all = true;
            for (const auto& needle : needles) all = all && line.find(needle) != std::string::npos;
            if (all) return true;
        }
        return false;
    }

    TempDir dir_;
    std::string bin_ = dir_.file("bin");
    std::string empty_bin_ = dir_.file("empty-bin");
    std::string modes_ = dir_.file("modes");
    std::string record_ = dir_.file("record");
    std::string system_pipe_ = dir_.file("system-mps");
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_env_;
};

TEST_F(MpsDaemonTest, StartsADaemonGivesItsDirectoriesToTheChildrenAndStopsIt) {
    const std::string pipe = options().dir + "/pipe";
    const std::string log = options().dir + "/log";
    pid_t daemon_pid = 0, server_pid = 0;
    {
        MpsDaemon mps = MpsDaemon::ensure(options());
        ASSERT_EQ(mps.kind(), MpsDaemon::Kind::kStarted);
        EXPECT_EQ(mps.kindName(), "started");
        EXPECT_EQ(mps.pipeDirectory(), pipe);
        const std::vector<std::pair<std::string, std::string>> env = {{"CUDA_MPS_PIPE_DIRECTORY", pipe},
                                                                      {"CUDA_MPS_LOG_DIRECTORY", log}};
        EXPECT_EQ(mps.childEnv(), env);
        EXPECT_TRUE(fs::is_directory(log));
        EXPECT_TRUE(fs::exists(pipe + "/control"));
        daemon_pid = pidIn(pipe + "/nvidia-cuda-mps-control.pid");
        server_pid = pidIn(pipe + "/server.pid");
        EXPECT_TRUE(alive(daemon_pid));
        EXPECT_TRUE(alive(server_pid));
        const auto lines = linesOf(record_);
        ASSERT_EQ(lines.size(), 1u) << readFile(record_);
        EXPECT_EQ(lines[0], "-d pipe=" + pipe + " log=" + log);
    }
    const auto lines = linesOf(record_);
    ASSERT_EQ(lines.size(), 2u) << readFile(record_);
    EXPECT_EQ(lines[1], " quit pipe=" + pipe);
    EXPECT_FALSE(alive(daemon_pid));
    EXPECT_FALSE(alive(server_pid));
}

TEST_F(MpsDaemonTest, StopsTheDaemonItStartedOnceWhetherStoppedOrDestroyedEarly) {
    const std::string pid_file = options().dir + "/pipe/nvidia-cuda-mps-control.pid";
    pid_t daemon_pid = 0;
    // A launch that fails after the daemon started: the destructor stops it.
    EXPECT_THROW(
        {
            MpsDaemon mps = MpsDaemon::ensure(options());
            ASSERT_EQ(mps.kind(), MpsDaemon::Kind::kStarted);
            daemon_pid = pidIn(pid_file);
            throw std::runtime_error("the launch failed");
        },
        std::runtime_error);
    EXPECT_FALSE(alive(daemon_pid));
    EXPECT_EQ(countRecorded(" quit"), 1u) << readFile(record_);

    // stop(), then the destructor (and a move): one quit.
    {
        MpsDaemon mps = MpsDaemon::ensure(options());
        ASSERT_EQ(mps.kind(), MpsDaemon::Kind::kStarted);
        daemon_pid = pidIn(pid_file);
        MpsDaemon moved = std::move(mps);
        EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kNone);
        moved.stop();
        EXPECT_FALSE(alive(daemon_pid));
        EXPECT_EQ(moved.kind(), MpsDaemon::Kind::kNone);
        moved.stop();
    }
    EXPECT_EQ(countRecorded(" quit"), 2u) << readFile(record_);
    EXPECT_EQ(countRecorded("-d"), 2u) << readFile(record_);
}

TEST_F(MpsDaemonTest, UsesADaemonThatRunsAlreadyAndLeavesItRunning) {
    startSystemDaemon();
    const pid_t daemon_pid = pidIn(system_pipe_ + "/nvidia-cuda-mps-control.pid");
    {
        MpsDaemon mps = MpsDaemon::ensure(options());
        EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kRunning);
        EXPECT_EQ(mps.kindName(), "running");
        EXPECT_EQ(mps.pipeDirectory(), system_pipe_);
        EXPECT_TRUE(mps.childEnv().empty());  // the children inherit CUDA_MPS_PIPE_DIRECTORY
        mps.stop();
    }
    EXPECT_TRUE(alive(daemon_pid));
    const auto lines = linesOf(record_);
    ASSERT_EQ(lines.size(), 2u) << readFile(record_);
    EXPECT_EQ(lines[1], " get_server_list pipe=" + system_pipe_);
    EXPECT_EQ(countRecorded(" quit"), 0u);
}

TEST_F(MpsDaemonTest, StartsItsOwnWhenTheControlPipeFoundDoesNotAnswer) {
    fs::create_directories(system_pipe_);
    std::ofstream(system_pipe_ + "/control").flush();  // left by a daemon that is gone
    MpsDaemon mps = MpsDaemon::ensure(options());
    EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kStarted);
    EXPECT_EQ(mps.pipeDirectory(), options().dir + "/pipe");
    const auto lines = linesOf(record_);
    ASSERT_EQ(lines.size(), 2u) << readFile(record_);
    EXPECT_EQ(lines[0], " get_server_list pipe=" + system_pipe_);
    EXPECT_EQ(lines[1].rfind("-d pipe=" + options().dir + "/pipe", 0), 0u) << lines[1];
}

TEST_F(MpsDaemonTest, WarnsWhenTheToolIsMissing) {
    ::setenv("PATH", empty_bin_.c_str(), 1);
    startSystemDaemon();  // even a running daemon cannot be asked without the tool
    MpsOptions o = options();
    o.shared_gpus = {0, 2};
    core::LogCapture log;
    MpsDaemon mps = MpsDaemon::ensure(o);
    EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kNone);
    EXPECT_EQ(mps.kindName(), "none");
    EXPECT_TRUE(mps.childEnv().empty());
    EXPECT_TRUE(anyLineHas(log.lines(),
                           {"GPU(s) 0,2", "nvidia-cuda-mps-control is not on PATH", "time-slice", "4.5 ms", "1.7 µs"}))
        << ::testing::PrintToString(log.lines());
    EXPECT_EQ(countRecorded(" get_server_list"), 0u);
}

TEST_F(MpsDaemonTest, WarnsAndLeavesNothingRunningWhenTheStartFails) {
    {
        std::ofstream(modes_ + "/fail_start").flush();
        core::LogCapture log;
        MpsDaemon mps = MpsDaemon::ensure(options());
        EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kNone);
        EXPECT_TRUE(mps.childEnv().empty());
        EXPECT_TRUE(anyLineHas(log.lines(), {"GPU(s) 0", "exited with code 1", "already running", "time-slice"}))
            << ::testing::PrintToString(log.lines());
        EXPECT_EQ(countRecorded(" quit"), 0u) << "nothing started, so nothing to stop";
        fs::remove(modes_ + "/fail_start");
    }
    {
        // A daemon that never creates its control pipe: it is killed once the bounded wait ends.
        std::ofstream(modes_ + "/no_control").flush();
        MpsOptions o = options();
        o.start_timeout = 300ms;
        o.command_timeout = 300ms;
        core::LogCapture log;
        const auto start = std::chrono::steady_clock::now();
        MpsDaemon mps = MpsDaemon::ensure(o);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
        EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kNone);
        EXPECT_TRUE(anyLineHas(log.lines(), {"control pipe", "did not appear within 300 ms"}))
            << ::testing::PrintToString(log.lines());
        const std::string pipe = o.dir + "/pipe";
        EXPECT_FALSE(alive(pidIn(pipe + "/nvidia-cuda-mps-control.pid")));
        EXPECT_FALSE(alive(pidIn(pipe + "/server.pid")));
    }
}

TEST_F(MpsDaemonTest, KillsADaemonThatDoesNotQuitAndItsServers) {
    std::ofstream(modes_ + "/ignore_quit").flush();
    MpsOptions o = options();
    o.command_timeout = 300ms;
    const std::string pipe = o.dir + "/pipe";
    MpsDaemon mps = MpsDaemon::ensure(o);
    ASSERT_EQ(mps.kind(), MpsDaemon::Kind::kStarted);
    const pid_t daemon_pid = pidIn(pipe + "/nvidia-cuda-mps-control.pid");
    const pid_t server_pid = pidIn(pipe + "/server.pid");
    ASSERT_TRUE(alive(server_pid));
    core::LogCapture log;
    mps.stop();
    EXPECT_FALSE(alive(daemon_pid));
    EXPECT_FALSE(alive(server_pid));
    EXPECT_TRUE(anyLineHas(log.lines(), {"did not exit within 300 ms of quit", "killing it"}))
        << ::testing::PrintToString(log.lines());
}

TEST_F(MpsDaemonTest, WarnsWhenThePipeDirectoryIsTooLongForASocket) {
    MpsOptions o = options();
    o.dir = dir_.file(std::string(120, 'd'));
    core::LogCapture log;
    MpsDaemon mps = MpsDaemon::ensure(o);
    EXPECT_EQ(mps.kind(), MpsDaemon::Kind::kNone);
    EXPECT_TRUE(anyLineHas(log.lines(), {"too long for a Unix socket path", "time-slice"}))
        << ::testing::PrintToString(log.lines());
    EXPECT_EQ(countRecorded("-d"), 0u);
}

TEST(MpsSharedGpus, CountsEveryRankOnAGpu) {
    using V = std::vector<int>;
    EXPECT_EQ(gpusSharedByRanks({0}, {0, 0}), V{0});
    EXPECT_EQ(gpusSharedByRanks({0}, {1}), V{});
    EXPECT_EQ(gpusSharedByRanks({0}, {0, 1}), V{0});  // launch --device cuda 1A2F without ids
    EXPECT_EQ(gpusSharedByRanks({}, {0, 0}), V{0});   // CPU attention, two FFN ranks on GPU 0
    EXPECT_EQ(gpusSharedByRanks({}, {0, 1}), V{});
    EXPECT_EQ(gpusSharedByRanks({2}, {}), V{});
    EXPECT_EQ(gpusSharedByRanks({1, 0}, {0, 1, 3}), (V{0, 1}));
    EXPECT_EQ(gpusSharedByRanks({}, {}), V{});
}

TEST(MpsSharedGpus, TheWarningNamesTheGpusTheCostAndWhy) {
    core::LogCapture log;
    warnSharedGpusTimeSlice({0, 1}, "--no-mps");
    const std::vector<std::string> lines = log.lines();
    ASSERT_EQ(lines.size(), 1u);
    const std::string& line = lines[0];
    for (const char* needle : {"GPU(s) 0,1", "--no-mps", "time-slice", "4.5 ms", "H200", "1.7 µs"}) {
        EXPECT_NE(line.find(needle), std::string::npos) << needle << " in " << line;
    }
}

}  // namespace
}  // namespace afd::cli
