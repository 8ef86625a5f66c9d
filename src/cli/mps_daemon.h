// MpsDaemon: the CUDA MPS control daemon (`nvidia-cuda-mps-control`) a launcher wants while two or more of its ranks
// share a GPU. Without one, the CUDA contexts of processes on one GPU time-slice: a hand-off between two of them costs
// about 4.5 ms (measured on an H200) against about 1.7 µs under MPS.
//
// MpsDaemon::ensure() never fails the launch:
//   - a daemon already running (its pipe directory, $CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps, holds a `control`
//     pipe and `get_server_list` answers within the command timeout) is used as it is and left running;
//   - else, with `nvidia-cuda-mps-control` on PATH, one is started (`-d`) with its pipe and log directories in
//     `<dir>/pipe` and `<dir>/log`; the children get them through childEnv(); it is stopped (`quit`, a bounded wait
//     for its exit, then SIGTERM / SIGKILL to it and its MPS servers) by stop() or the destructor;
//   - else (no tool, or a start that fails) a WARN names the shared GPUs and the cost, and the launch goes on.
//
// Ownership: a started daemon belongs to the object (move-only); declare it after the run directory that holds its
// folders and before the children that use it, so that the children are stopped first. Threads: one owner.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace afd::cli {

// The GPUs (ascending, each once) that two or more ranks run on. `attention_gpus` and `ffn_gpus` hold each rank's GPU
// index, by rank (empty for a role on the CPU). {0} and {0, 0} share GPU 0; {0} and {1} share none.
std::vector<int> gpusSharedByRanks(const std::vector<int>& attention_gpus, const std::vector<int>& ffn_gpus);

// The WARN for ranks that share `gpus` without MPS; `why` says why no daemon serves them ("--no-mps").
void warnSharedGpusTimeSlice(const std::vector<int>& gpus, std::string_view why);

struct MpsOptions {
    std::string dir;               // folder (created) for the started daemon's pipe/ and log/ and the tool's output
    std::vector<int> shared_gpus;  // the GPUs ranks share (messages only)
    std::string tool = "nvidia-cuda-mps-control";     // looked up on PATH
    std::chrono::milliseconds start_timeout{5000};    // `-d` returning and its control pipe appearing
    std::chrono::milliseconds command_timeout{5000};  // one control command; the daemon's exit after `quit`
};

class MpsDaemon {
public:
    enum class Kind {
        kNone,     // no daemon serves the ranks (warned)
        kRunning,  // one that was running already: used, never stopped
        kStarted,  // started by this object, stopped by it
    };

    // The daemon the ranks use, as described above. Never throws for a failure of the tool; logs what it does.
    static MpsDaemon ensure(const MpsOptions& options);

    MpsDaemon() = default;
    ~MpsDaemon();
    MpsDaemon(MpsDaemon&& other) noexcept;
    MpsDaemon& operator=(MpsDaemon&& other) noexcept;  // a daemon held before is stopped
    MpsDaemon(const MpsDaemon&) = delete;
    MpsDaemon& operator=(const MpsDaemon&) = delete;

    Kind kind() const { return kind_; }
    // "none", "running" (it was already), "started": for reports.
    std::string_view kindName() const;
    // The variables every child rank needs to reach the daemon (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY);
    // empty unless this object started it (a running daemon is reached through the inherited environment).
    const std::vector<std::pair<std::string, std::string>>& childEnv() const { return env_; }
    const std::string& pipeDirectory() const { return pipe_dir_; }

    // Stops a daemon this object started and waits (bounded) until it has exited; logs it. Idempotent; nothing for a
    // daemon that was already running.
    void stop() noexcept;

private:
    // Starts the daemon (kind kStarted on success); on failure nothing of it is left running.
    core::Status start(const MpsOptions& options);

    Kind kind_ = Kind::kNone;
    std::string tool_;      // absolute path of nvidia-cuda-mps-control
    std::string dir_;       // MpsOptions::dir
    std::string pipe_dir_;  // the daemon's pipe directory (kRunning: the inherited one)
    std::vector<std::pair<std::string, std::string>> env_;
    std::chrono::milliseconds command_timeout_{5000};
};

}  // namespace afd::cli
