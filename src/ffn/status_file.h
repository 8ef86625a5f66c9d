// The FFN service's status file: one JSON object written when the process ends (on every exit path that can
// still write) and, while the rank serves sessions forever, after each session ends (state "waiting_for_session",
// exit_reason still empty), atomically (temporary file + rename), so an orchestrator can tell why a rank stopped
// and how its sessions went.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "ffn/session_ledger.h"

namespace afd::ffn {

struct ServiceStatusReport {
    std::string exit_reason;       // stopped | peers_finished | peer_lost | config_error | load_error |
                                   // connect_error | protocol_error | error | internal_error; empty while running
    std::string state = "exited";  // "exited" at the end; the service's state in a write while it runs
    int exit_code = 0;
    std::string error;  // empty when none
    int rank = -1;
    int64_t expert_begin = 0;
    int64_t expert_end = 0;
    uint64_t weight_bytes = 0;
    uint64_t steps = 0;
    uint64_t tokens = 0;
    bool resources_released = false;  // worker joined, connector closed, device memory freed
    std::string released_detail;      // what was released, or what could not be
    ServeSessions serve_sessions = ServeSessions::kForever;
    SessionSummary sessions;
};

core::Status writeStatusFile(const std::string& path, const ServiceStatusReport& report);

}  // namespace afd::ffn
