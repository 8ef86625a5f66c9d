#include "ffn/session_ledger.h"

#include <nlohmann/json.hpp>

namespace afd::ffn {
namespace {

constexpr std::string_view kSessionsHelp =
    "Sessions this FFN rank has served to their end, by result (finished: every attention peer left; failed: the "
    "set-up failed or a peer was lost or broke the protocol).";

}  // namespace

std::string_view serveSessionsName(ServeSessions mode) { return mode == ServeSessions::kOnce ? "once" : "forever"; }

std::optional<ServeSessions> parseServeSessions(std::string_view text) {
    if (text == "once") return ServeSessions::kOnce;
    if (text == "forever") return ServeSessions::kForever;
    return std::nullopt;
}

nlohmann::json sessionSummaryJson(const SessionSummary& s) {
    nlohmann::json j = {{"current", s.current}, {"finished", s.finished}, {"failed", s.failed}, {"last", nullptr}};
    if (s.last != 0) j["last"] = {{"session", s.last}, {"result", s.last_result}, {"error", s.last_error}};
    return j;
}

SessionLedger::SessionLedger(core::MetricsRegistry& metrics)
    : finished_total_(metrics.counter("afd_ffn_sessions_total", kSessionsHelp, {{"result", "finished"}})),
      failed_total_(metrics.counter("afd_ffn_sessions_total", kSessionsHelp, {{"result", "failed"}})),
      current_gauge_(metrics.gauge("afd_ffn_session", "The rendezvous session this FFN rank serves or last served.")) {}

void SessionLedger::began(uint64_t session) {
    std::lock_guard lock(mutex_);
    summary_.current = session;
    current_gauge_.set(static_cast<double>(session));
}

void SessionLedger::finished() {
    std::lock_guard lock(mutex_);
    ++summary_.finished;
    summary_.last = summary_.current;
    summary_.last_result = "finished";
    summary_.last_error.clear();
    finished_total_.inc();
}

void SessionLedger::failed(std::string error) {
    std::lock_guard lock(mutex_);
    ++summary_.failed;
    summary_.last = summary_.current;
    summary_.last_result = "failed";
    summary_.last_error = std::move(error);
    failed_total_.inc();
}

SessionSummary SessionLedger::summary() const {
    std::lock_guard lock(mutex_);
    return summary_;
}

}  // namespace afd::ffn
