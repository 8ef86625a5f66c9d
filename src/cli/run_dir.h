// RunDir: the directory a launcher (`afd launch`, `afd serve` with FFN ranks, `afd quickstart`) keeps its children's
// logs, port files and status files in. Without a directory from the user it is a fresh $TMPDIR/<prefix>XXXXXX
// (TMPDIR unset: /tmp) that the destructor removes, unless keep() was called (a run that failed after a child
// started: its logs matter, and the launcher names the directory in its error). A directory the user gave is created
// when missing and never removed.
//
// Ownership: declare it before the children that write into it, so that they are stopped first. Threads: one owner.
#pragma once

#include <string>

#include "core/status.h"

namespace afd::cli {

class RunDir {
public:
    // `dir` empty: a fresh temporary directory named `prefix` + six random characters. Errors: kIoError.
    static core::Result<RunDir> create(const std::string& dir, const std::string& prefix);

    RunDir() = default;
    ~RunDir();
    RunDir(RunDir&& other) noexcept;
    RunDir& operator=(RunDir&& other) noexcept;
    RunDir(const RunDir&) = delete;
    RunDir& operator=(const RunDir&) = delete;

    const std::string& path() const { return path_; }
    bool empty() const { return path_.empty(); }
    // Whether the destructor removes it (a temporary directory not kept).
    bool removedAtEnd() const { return owned_ && !kept_; }
    void keep() { kept_ = true; }

private:
    void removeIfOwned() noexcept;

    std::string path_;
    bool owned_ = false;
    bool kept_ = false;
};

}  // namespace afd::cli
