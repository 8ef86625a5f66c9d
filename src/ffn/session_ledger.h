// What an FFN rank tells about the sessions it serves (/status, the status file, /metrics): the number of the current
// (or last) rendezvous session, how many sessions have ended and how, and the last one's result.
//
// A session is one rendezvous of every rank and what follows it: serving steps until every attention peer has left
// (finished) or until it broke (failed: the set-up failed, or a peer was lost or broke the protocol mid-session).
//
// Metrics (registered at construction, so /metrics shows them from the start):
//   afd_ffn_sessions_total{result="finished"|"failed"}  counter
//   afd_ffn_session                                     gauge: the current or last session's number (0: none yet)
//
// Threads: every method is thread-safe (the service's main thread writes, the admin thread reads).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/metrics.h"

namespace afd::ffn {

// --serve-sessions: once (the rank's life is one session: after it, the rank waits to be stopped) or forever (after
// each session the rank rejoins the rendezvous for the next, until it is stopped).
enum class ServeSessions { kOnce, kForever };

std::string_view serveSessionsName(ServeSessions mode);
std::optional<ServeSessions> parseServeSessions(std::string_view text);

struct SessionSummary {
    uint64_t current = 0;  // the session being set up or served, else the last one (0: none yet)
    uint64_t finished = 0;
    uint64_t failed = 0;
    uint64_t last = 0;        // the last session that ended (0: none yet)
    std::string last_result;  // "finished" | "failed" | "" (none yet)
    std::string last_error;   // why the last one failed; empty otherwise
};

// {"current": 3, "finished": 1, "failed": 1, "last": {"session": 2, "result": "failed", "error": "…"}} ("last" is
// null before any session has ended).
nlohmann::json sessionSummaryJson(const SessionSummary& summary);

class SessionLedger {
public:
    explicit SessionLedger(core::MetricsRegistry& metrics);

    // The rendezvous chose `session` (the rank registers in it).
    void began(uint64_t session);
    // The current session ended: every attention peer left (error empty), or it failed with `error`.
    void finished();
    void failed(std::string error);

    SessionSummary summary() const;

private:
    core::Counter& finished_total_;
    core::Counter& failed_total_;
    core::Gauge& current_gauge_;
    mutable std::mutex mutex_;
    SessionSummary summary_;
};

}  // namespace afd::ffn
