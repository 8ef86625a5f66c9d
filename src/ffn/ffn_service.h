// FfnService: the `afd ffn` process (DESIGN.md §6).
//
//   parse and validate everything (AFD config with role ffn, RANK/WORLD_SIZE/LOCAL_RANK with WORLD_SIZE ==
//   num_ffn_ranks, the device, afd.connector against this build and the device, the model's config.json, the
//   expert range, the admin token), bind every port this rank listens on (the admin port; on rank 0 the
//   rendezvous store at afd.host:afd.port) → exit 2 on any error, before any weight is read
//   → admin HTTP serves (/health /ready /status /metrics, POST /stop): /status says "loading" with the layers loaded
//   → load only this rank's weights, report the bytes                             → exit 1 on a bad checkpoint
//   → sessions, each: rendezvous and connect (either start order) → the step loop on a worker thread, until every
//     attention peer has left or one is lost
//   → wait for SIGTERM/SIGINT, POST /stop, the session's end (once), or a loop error
//   → ordered shutdown: stop → cancel an idle receive → join (bounded) → close the connector → release device
//     memory → stop HTTP → status file → exit code (0 clean stop, 2 configuration, 3 peer lost, 1 other
//     run-time failure, 4 internal error).
// Sessions (--serve-sessions): `forever` (the default: a standalone pool) keeps the weights loaded and, after each
// session (every attention peer left, or the session failed: a peer lost, a protocol error, a set-up that failed),
// makes a new connector for the next one (the rendezvous again, state waiting_for_session, without a deadline until
// attention rank 0 comes): the rank ends only when stopped, or on an internal error or a configuration error that the
// next session would meet again. `once` (what `afd launch` and `afd serve` ask for): the rank's life is one session;
// when every attention peer has left, the rank stays up (state session_ended, /ready 503) until it is told to stop,
// so an orchestrator's stop sequence behaves the same whether or not attention finished first; a failed session
// ends the rank with the failure's exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ffn/session_ledger.h"

namespace afd::ffn {

struct FfnServiceOptions {
    std::string model_dir;
    std::optional<std::string> additional_config;  // --additional-config JSON
    std::optional<std::string> afd_config_file;    // --afd-config FILE
    // Flags override the torchrun-style environment variables RANK, WORLD_SIZE, LOCAL_RANK.
    std::optional<int> rank;
    std::optional<int> world_size;
    std::optional<int> local_rank;
    std::string admin_host = "127.0.0.1";
    int admin_port = 0;                      // 0: an ephemeral port (logged, and written to admin_port_file)
    std::string admin_port_file;             // optional: receives the bound admin port once it serves
    std::optional<std::string> admin_token;  // --admin-token (else $AFD_ADMIN_TOKEN); needed off loopback

    std::string status_file;          // optional: written at exit
    std::string device = "cpu";       // cpu | cuda
    std::string device_ids;           // cuda: comma-separated GPUs; LOCAL_RANK indexes it (default: LOCAL_RANK)
    int64_t shutdown_timeout_s = 15;  // bound on joining the step loop
    ServeSessions serve_sessions = ServeSessions::kForever;  // --serve-sessions
    bool enforce_eager = false;                              // --enforce-eager: no CUDA graphs (per layer or per step)
    bool enable_dbo = false;  // --enable-dbo: two lanes on the GPU, so two-stage steps overlap
    // --random-weights: draw the weights `afd gen-model --seed weights_seed` writes on the GPU (model_dir needs only
    // config.json); the attention ranks run with the same flag and seed.
    bool random_weights = false;
    uint64_t weights_seed = 0;
};

// Runs the service to the end; returns the process exit code. Must be called before any other thread of the
// process starts (it blocks SIGTERM/SIGINT for the process and watches them itself).
int runFfnService(const FfnServiceOptions& options);

}  // namespace afd::ffn
