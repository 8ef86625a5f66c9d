#include "cli/run_dir.h"

#include <stdlib.h>

#include <filesystem>
#include <utility>
#include <vector>

namespace afd::cli {

core::Result<RunDir> RunDir::create(const std::string& dir, const std::string& prefix) {
    RunDir run;
    std::error_code ec;
    if (!dir.empty()) {
        std::filesystem::create_directories(dir, ec);
        if (ec) return core::ioError("--run-dir {}: {}", dir, ec.message());
        run.path_ = dir;
        return run;
    }
    std::filesystem::path root = std::filesystem::temp_directory_path(ec);
    if (ec) root = "/tmp";
    std::string templ = (root / (prefix + "XXXXXX")).string();
    std::vector<char> buffer(templ.begin(), templ.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) return core::ioError("cannot create a run directory {}", templ);
    run.path_ = buffer.data();
    run.owned_ = true;
    return run;
}

RunDir::~RunDir() { removeIfOwned(); }

RunDir::RunDir(RunDir&& other) noexcept
    : path_(std::exchange(other.path_, {})),
      owned_(std::exchange(other.owned_, false)),
      kept_(std::exchange(other.kept_, false)) {}

RunDir& RunDir::operator=(RunDir&& other) noexcept {
    if (this != &other) {
        removeIfOwned();
        path_ = std::exchange(other.path_, {});
        owned_ = std::exchange(other.owned_, false);
        kept_ = std::exchange(other.kept_, false);
    }
    return *this;
}

void RunDir::removeIfOwned() noexcept {
    if (!removedAtEnd() || path_.empty()) return;
    std::error_code ec;  // best effort: a directory that cannot be removed is left behind
    std::filesystem::remove_all(path_, ec);
    path_.clear();
}

}  // namespace afd::cli
