// Helpers for multi-process AFD tests: free ports, FFN/attention processes of the `afd` binary, admin HTTP.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/child_process.h"

namespace afd::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
int freePort();

// {"afd": {...}} text with the given counts, mode and port (and any extra members, a JSON fragment without braces).
std::string afdConfigJson(int num_attention, int num_ffn, bool m2n, int port, const std::string& extra = "");

struct FfnProcess {
    core::ChildProcess process;
    std::string log_path;
    std::string status_path;
    std::string port_path;
    int admin_port = 0;
};

// Starts `afd ffn` rank `rank` of `world` with the config, `extra_args` and `extra_env` (added to RANK, WORLD_SIZE,
// LOCAL_RANK and AFD_NUM_THREADS=1); logs and files go under `dir`.
FfnProcess startFfn(const std::string& dir, const std::string& model, const std::string& config, int rank, int world,
                    const std::vector<std::string>& extra_args = {},
                    const std::vector<std::pair<std::string, std::string>>& extra_env = {});
// `afd ffn` flags of a rank whose life is one session (it then waits to be stopped; a failed session ends it).
inline const std::vector<std::string> kOneSession = {"--serve-sessions", "once"};
// Waits for the admin port file; 0 when the process exits or the wait times out.
int waitAdminPort(FfnProcess& ffn, std::chrono::milliseconds timeout = std::chrono::seconds(30));

struct AttentionProcess {
    core::ChildProcess process;
    std::string out_path;
    std::string log_path;
};

AttentionProcess startAttention(const std::string& dir, const std::string& model, const std::string& config, int rank,
                                const std::vector<std::string>& prompts, int max_tokens,
                                const std::vector<std::string>& extra_args = {});

std::string readText(const std::string& path);
// GET/POST on 127.0.0.1:port; nullopt when it fails.
std::optional<std::string> httpGet(int port, const std::string& path);
bool httpPostStop(int port);

}  // namespace afd::testing
