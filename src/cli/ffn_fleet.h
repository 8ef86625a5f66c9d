// FfnFleet: the FFN ranks a launcher starts on this machine (`afd launch`, `afd serve` with an AFD config that names
// no role): F `afd ffn` children with torchrun-style rank variables, each with an admin port file, a status file and
// a log in the run directory. The fleet waits until each has an admin port and is ready, watches for children that
// exit early (naming the rank and printing the end of its log), and stops them in order: POST /stop to each, a bounded
// wait, then a check of each status file (exit code 0 and resources released).
//
// Ownership: the fleet owns the children; the destructor (and terminate()) sends SIGTERM to those still running, waits
// one shared grace period, then kills the rest, so no path leaves an orphan. Threads: one owner thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/child_process.h"
#include "core/status.h"

namespace afd::cli {

struct FfnFleetSpec {
    std::string binary;     // the afd executable
    std::string model_dir;  // the checkpoint every FFN rank loads its experts from
    // The user's afd object with the launcher's defaults (ranks, port); "role" is set to "ffn" per child.
    nlohmann::json afd;
    int num_ffn_ranks = 0;
    std::vector<std::string> device_args;  // `afd ffn` device flags (launch_devices.h's ffnDeviceArgs)
    std::string run_dir;                   // logs, port files and status files go here
    std::string log_level = "warn";        // the children's --log-level
    bool inherit_stderr = false;           // children log to this terminal instead of their log files
    std::string num_threads_env;           // AFD_NUM_THREADS for each child; empty: leave it unset
    // Added to each child's environment (e.g. the pipe directory of an MPS daemon the launcher started).
    std::vector<std::pair<std::string, std::string>> env;
};

struct FfnRankProcess {
    std::string name;  // "ffn rank 3"
    core::ChildProcess process;
    std::string log_path;
    std::string port_file;
    std::string status_file;
    int admin_port = 0;
    std::optional<int> exit_code;
};

class FfnFleet {
public:
    FfnFleet() = default;
    ~FfnFleet() { terminate(std::chrono::seconds(20)); }
    FfnFleet(FfnFleet&&) = default;
    FfnFleet& operator=(FfnFleet&&) = default;  // children held before are killed (ChildProcess)
    FfnFleet(const FfnFleet&) = delete;
    FfnFleet& operator=(const FfnFleet&) = delete;

    // Spawns the children (kIoError naming the rank when one cannot be started; those started are stopped).
    static core::Result<FfnFleet> spawn(const FfnFleetSpec& spec);

    // Until every rank has written its admin port (kPeerLost naming the rank that exited, kInternal for one that wrote
    // garbage, kTimeout past `deadline`, kCancelled once `interrupted`).
    core::Status waitForAdminPorts(std::chrono::steady_clock::time_point deadline,
                                   const std::atomic<bool>& interrupted);
    // Until GET /ready answers 200 (or the rank's session already ended) on every rank. `other_failed`, called while
    // waiting, returns an error that ends the wait (another process of the deployment failing). Errors as above.
    core::Status waitForReady(std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& interrupted,
                              const std::function<core::Status()>& other_failed = {});

    // The first rank that has exited since the last call (kPeerLost naming it and its exit code, with the end of its
    // log in the message), or ok while all run. `while_doing` goes into the message ("serving").
    core::Status checkRunning(const std::string& while_doing);

    // The exit code a launcher reports once a rank has failed (core::exitCodeForChild of the first rank that exited
    // non-zero: a rank killed by a signal is kExitPeerLost); kExitPeerLost when none has.
    int failedRankExitCode() const;

    // GET /status of one rank (an empty object when it does not answer).
    nlohmann::json status(size_t rank) const;

    // POST /stop to every rank, waits up to `timeout` for each to exit, and checks each status file: true when every
    // rank exited with code 0 and released its resources (each failure is logged with its log's path).
    bool stop(std::chrono::milliseconds timeout);

    // SIGTERM to every rank still running, one shared `grace`, then SIGKILL. Idempotent.
    void terminate(std::chrono::milliseconds grace);

    std::vector<FfnRankProcess>& ranks() { return ranks_; }
    std::vector<int> adminPorts() const;

private:
    std::vector<FfnRankProcess> ranks_;
};

// Fills in a launcher's defaults in the user's afd object (its "afd" value, checked by AfdConfig's parser first):
// m2n with 1 attention rank and 2 FFN ranks when neither count is given (p2p without counts keeps the config's own
// 1A1F, since p2p needs at least as many attention ranks as FFN ranks), and a free loopback port for FFN rank 0
// when none is given.
core::Status launchDefaults(nlohmann::json& afd);

// The last `lines` lines of the file at `path` (empty when it is empty or cannot be read).
std::string logTail(const std::string& path, size_t lines);

// How a child exited, from ChildProcess's code: "exited with code 2", or "was killed by signal 9 (SIGKILL)" for
// 128 + signal.
std::string describeExit(int code);

// "<name> <describeExit(code)> while <while_doing>; last lines of its log (<log_path>):\n…", or "…; its log
// (<log_path>) is empty" (a child killed before it wrote anything).
std::string childFailureReport(const std::string& name, int code, const std::string& while_doing,
                               const std::string& log_path);

}  // namespace afd::cli
