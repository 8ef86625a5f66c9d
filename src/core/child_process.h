// ChildProcess: a process this one started, owned like any resource. The destructor kills (SIGKILL) and reaps a
// child that is still running, so no path leaves an orphan; children also get SIGTERM if this process dies
// (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace afd::core {

class ChildProcess {
public:
    struct Spec {
        std::vector<std::string> argv;                         // argv[0] is a path
        std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) this environment
        std::vector<std::string> unset_env;                    // removed from it
        std::string stdout_path;                               // empty: inherit
        std::string stderr_path;                               // empty: inherit
    };

    static Result<ChildProcess> spawn(const Spec& spec);
    ChildProcess() = default;
    ~ChildProcess();
    ChildProcess(ChildProcess&& other) noexcept;
    ChildProcess& operator=(ChildProcess&& other) noexcept;
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t pid() const { return pid_; }
    // Reaps the child if it has exited; returns its exit code (128 + signal for a signal), or nullopt while it
    // runs.
    std::optional<int> poll();
    // Waits up to `timeout` for the exit.
    std::optional<int> wait(std::chrono::milliseconds timeout);
    void signal(int sig);
    // SIGTERM, then SIGKILL after `grace`; returns the exit code.
    int terminate(std::chrono::milliseconds grace);

private:
    // Kills and reaps a child that is still running.
    void reset() noexcept;

    pid_t pid_ = -1;
    std::optional<int> exit_code_;
};

}  // namespace afd::core
