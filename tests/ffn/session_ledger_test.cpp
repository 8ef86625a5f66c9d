// The FFN rank's account of its sessions: counts by result, the current and last session, their metrics and JSON.
#include "ffn/session_ledger.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/prometheus_text.h"

namespace afd::ffn {
namespace {

TEST(SessionLedger, CountsSessionsByResultAndNamesTheLastOne) {
    core::MetricsRegistry metrics;
    SessionLedger ledger(metrics);
    core::PrometheusText m = core::PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.series("afd_ffn_sessions_total").size(), 2u) << "both results show from the start, at 0";
    EXPECT_EQ(sessionSummaryJson(ledger.summary())["last"], nullptr);

    ledger.began(1);
    ledger.finished();
    ledger.began(2);
    ledger.failed("attention rank 0 (127.0.0.1:1) reset the connection");
    ledger.began(3);
    const SessionSummary s = ledger.summary();
    EXPECT_EQ(s.current, 3u);
    EXPECT_EQ(s.finished, 1u);
    EXPECT_EQ(s.failed, 1u);
    EXPECT_EQ(s.last, 2u);
    EXPECT_EQ(s.last_result, "failed");
    const nlohmann::json j = sessionSummaryJson(s);
    EXPECT_EQ(j["current"], 3);
    EXPECT_EQ(j["last"]["session"], 2);
    EXPECT_EQ(j["last"]["error"], "attention rank 0 (127.0.0.1:1) reset the connection");

    m = core::PrometheusText::parse(metrics.render());
    EXPECT_EQ(m.sum("afd_ffn_sessions_total", {{"result", "finished"}}), 1);
    EXPECT_EQ(m.sum("afd_ffn_sessions_total", {{"result", "failed"}}), 1);
    EXPECT_EQ(m.sum("afd_ffn_session"), 3);
    ledger.finished();
    EXPECT_TRUE(ledger.summary().last_error.empty());
    EXPECT_EQ(ledger.summary().last_result, "finished");
}

TEST(SessionLedger, ServeSessionsNamesRoundTrip) {
    for (const ServeSessions mode : {ServeSessions::kOnce, ServeSessions::kForever}) {
        EXPECT_EQ(parseServeSessions(serveSessionsName(mode)), mode);
    }
    EXPECT_FALSE(parseServeSessions("twice").has_value());
}

}  // namespace
}  // namespace afd::ffn
