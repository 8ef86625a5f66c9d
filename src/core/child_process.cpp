#include "core/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace afd::core {

Result<ChildProcess> ChildProcess::spawn(const Spec& spec) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        bool replaced = false;
        for (const auto& [key, value] : spec.env) replaced |= entry.rfind(key + "=", 0) == 0;
        for (const auto& key : spec.unset_env) replaced |= entry.rfind(key + "=", 0) == 0;
        if (!replaced) env_strings.push_back(entry);
    }
    for (const auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec.argv;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    auto openOut = [](const std::string& path) -> int {
        return path.empty() ? -1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    };
    const int out_fd = openOut(spec.stdout_path);
    const int err_fd = openOut(spec.stderr_path);
    if ((!spec.stdout_path.empty() && out_fd < 0) || (!spec.stderr_path.empty() && err_fd < 0)) {
        if (out_fd >= 0) ::close(out_fd);
        if (err_fd >= 0) ::close(err_fd);
        return ioError("cannot open the output files of {}: {}", spec.argv[0], std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int error = errno;
        if (out_fd >= 0) ::close(out_fd);
        if (err_fd >= 0) ::close(err_fd);
        return ioError("fork failed: {}", std::strerror(error));
    }
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(127);  // the parent died between fork and prctl
        // Signals blocked in the parent (e.g. by a SignalWatcher) must not stay blocked in the child.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        if (out_fd >= 0) ::dup2(out_fd, 1);
        if (err_fd >= 0) ::dup2(err_fd, 2);
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    ChildProcess child;
    child.pid_ = pid;
    return child;
}

ChildProcess::~ChildProcess() { reset(); }

void ChildProcess::reset() noexcept {
    if (pid_ > 0 && !exit_code_) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    pid_ = -1;
    exit_code_.reset();
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), exit_code_(other.exit_code_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
    if (this != &other) {
        reset();
        pid_ = std::exchange(other.pid_, -1);
        exit_code_ = other.exit_code_;
    }
    return *this;
}

std::optional<int> ChildProcess::poll() {
    if (exit_code_ || pid_ <= 0) return exit_code_;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    } else if (r < 0 && errno == ECHILD) {
        // Reaped elsewhere: the pid may be reused, so it must never be signalled again.
        exit_code_ = 128 + SIGKILL;
    }
    return exit_code_;
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!poll() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
}

void ChildProcess::signal(int sig) {
    if (pid_ > 0 && !poll()) ::kill(pid_, sig);
}

int ChildProcess::terminate(std::chrono::milliseconds grace) {
    signal(SIGTERM);
    if (auto code = wait(grace)) return *code;
    signal(SIGKILL);
    return wait(std::chrono::seconds(10)).value_or(128 + SIGKILL);
}

}  // namespace afd::core
