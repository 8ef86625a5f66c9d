// Runs a command line with a hard timeout and captures its exit code, stdout and stderr (for CLI tests).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace afd::testing {

struct ProcessResult {
    int exit_code = -1;  // the exit status, or 128 + signal
    bool timed_out = false;
    std::string out;
    std::string err;
};

// argv[0] is a path. The process is killed (SIGKILL) when `timeout` passes.
ProcessResult runProcess(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A fresh empty directory under /tmp, removed with its contents when the object goes away.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

}  // namespace afd::testing
