// Long setup waits say whom they wait for: every report interval one INFO line names exactly the ranks still missing
// (rendezvous registration, peers connecting to an FFN rank) or the address not answering (connecting), with the
// time waited of the whole; the overall deadline stays what it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "transport/rendezvous.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/transport_test_util.h"
#include "transport/wait_progress.h"

namespace afd::transport {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace std::chrono_literals;
using testing::pickFreePort;
using testing::runAsync;

constexpr std::chrono::milliseconds kInterval = 100ms;
const std::string kFingerprint = "qwen3-moe-test/waits";

// The logged lines that contain `needle`.
std::vector<std::string> linesWith(const core::LogCapture& capture, const std::string& needle) {
    std::vector<std::string> out;
    for (const std::string& line : capture.lines()) {
        if (line.find(needle) != std::string::npos) out.push_back(line);
    }
    return out;
}

// What a registration report says is missing: the text between "waiting for " and " to register at".
std::string awaitedIn(const std::string& line) {
    const size_t begin = line.find("waiting for ");
    const size_t end = line.find(" to register at");
    if (begin == std::string::npos || end == std::string::npos || end < begin) return "?";
    return line.substr(begin + 12, end - begin - 12);
}

RendezvousOptions rendezvousOptions(int port, int num_attention, int num_ffn, std::chrono::milliseconds timeout) {
    RendezvousOptions o;
    o.store = {"127.0.0.1", port};
    o.num_attention_ranks = num_attention;
    o.num_ffn_ranks = num_ffn;
    o.timeout = timeout;
    o.report_interval = kInterval;
    return o;
}

TEST(WaitProgress, SlicesEndAtEachReportTimeAndTheDeadlineNeverMoves) {
    const Clock::time_point start = Clock::now();
    const Deadline deadline = start + 350ms;
    WaitProgress progress(start, deadline, kInterval);
    EXPECT_FALSE(progress.reportDue());  // the first slice has not run out
    EXPECT_LE(progress.sliceEnd(), start + 150ms);
    std::this_thread::sleep_until(progress.sliceEnd());
    EXPECT_TRUE(progress.reportDue());
    EXPECT_FALSE(progress.reportDue());  // once per slice
    EXPECT_THAT(progress.progress(), HasSubstr("ms of 350 ms"));
    std::this_thread::sleep_until(deadline);
    EXPECT_LE(progress.sliceEnd(), deadline);
    EXPECT_FALSE(progress.reportDue());  // past the deadline the wait ends instead

    WaitProgress silent(Clock::now(), kNoDeadline, 0ms);
    EXPECT_EQ(silent.sliceEnd(), kNoDeadline);
    EXPECT_FALSE(silent.reportDue());
    EXPECT_THAT(silent.progress(), HasSubstr("so far"));
    // Whole seconds where they are near enough.
    EXPECT_EQ(WaitProgress(Clock::now() - 5s, Clock::now() + 115s, kInterval).progress(), "5 s of 120 s");
    EXPECT_EQ(WaitProgress(Clock::now() - 1500ms, Clock::now() + 500ms, kInterval).progress(), "1.5 s of 2 s");
}

TEST(WaitReports, RendezvousNamesExactlyTheRanksStillMissing) {
    core::LogCapture capture;
    const int port = pickFreePort();
    // FFN rank 0 hosts the store and waits for ffn rank 1 and attention ranks 0 and 1; attention rank 0 comes after
    // a few reports, ffn rank 1 and attention rank 1 never do.
    RendezvousOptions host = rendezvousOptions(port, 2, 2, 1200ms);
    host.host_store = true;
    auto ffn0 = runAsync([host] { return Rendezvous::join(host, {Role::kFfn, 0, kProtocolVersion, kFingerprint}); });
    std::this_thread::sleep_for(450ms);
    const RendezvousOptions guest = rendezvousOptions(port, 2, 2, 500ms);
    const core::Status late = Rendezvous::join(guest, {Role::kAttention, 0, kProtocolVersion, kFingerprint}).status();
    const core::Status first = ffn0.get().status();

    // The deadlines are unchanged: both time out, naming who never came.
    EXPECT_EQ(first.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(first.message(), HasSubstr("ffn rank 1, attention rank 1 never registered"));
    EXPECT_EQ(late.code(), core::StatusCode::kTimeout);

    const std::vector<std::string> host_lines = linesWith(capture, "ffn rank 0: waiting for ");
    const std::vector<std::string> guest_lines = linesWith(capture, "attention rank 0: waiting for ");
    ASSERT_GE(host_lines.size(), 6u) << "one line every 100 ms of a 1.2 s wait";
    ASSERT_GE(guest_lines.size(), 2u);
    for (const std::string& line : host_lines) {
        EXPECT_THAT(line, HasSubstr(fmt::format("to register at 127.0.0.1:{} (", port)));
        EXPECT_THAT(line, HasSubstr(" of 1.2 s)"));
    }
    // Before attention rank 0 arrived, three ranks were missing; afterwards two; never a rank that had registered.
    EXPECT_EQ(awaitedIn(host_lines.front()), "ffn rank 1 (of 2) and attention ranks 0, 1 (of 2)");
    EXPECT_EQ(awaitedIn(host_lines.back()), "ffn rank 1 (of 2) and attention rank 1 (of 2)");
    for (const std::string& line : host_lines) {
        const std::string awaited = awaitedIn(line);
        EXPECT_TRUE(awaited == "ffn rank 1 (of 2) and attention ranks 0, 1 (of 2)" ||
                    awaited == "ffn rank 1 (of 2) and attention rank 1 (of 2)")
            << line;
    }
    for (const std::string& line : guest_lines) {
        EXPECT_EQ(awaitedIn(line), "ffn rank 1 (of 2) and attention rank 1 (of 2)") << line;
    }
    // Every report after attention rank 0 registered (about 50 ms before the next report) knows it: a report names
    // who is missing when it is made, not when its slice began.
    const std::vector<std::string> all = capture.lines();
    bool registered = false;
    int after = 0;
    for (const std::string& line : all) {
        if (line.find("registered as attention rank 0") != std::string::npos) registered = true;
        if (!registered || line.find("ffn rank 0: waiting for ") == std::string::npos) continue;
        ++after;
        EXPECT_EQ(awaitedIn(line), "ffn rank 1 (of 2) and attention rank 1 (of 2)") << line;
    }
    EXPECT_GE(after, 4);
}

TEST(WaitReports, AFetchNamesTheRankAndTheBlobItWaitsFor) {
    core::LogCapture capture;
    const int port = pickFreePort();
    RendezvousOptions host = rendezvousOptions(port, 1, 1, 10s);
    host.host_store = true;
    auto ffn0 = runAsync([host] { return Rendezvous::join(host, {Role::kFfn, 0, kProtocolVersion, kFingerprint}); });
    auto attention =
        Rendezvous::join(rendezvousOptions(port, 1, 1, 10s), {Role::kAttention, 0, kProtocolVersion, kFingerprint});
    ASSERT_TRUE(attention.isOk()) << attention.status().toString();
    auto ffn = ffn0.get();
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    auto publisher = runAsync([&] {
        std::this_thread::sleep_for(350ms);
        return (*ffn)->publish("nccl/unique_id", "id");
    });
    auto value = (*attention)->fetch(Role::kFfn, 0, "nccl/unique_id", 5s);
    ASSERT_TRUE(publisher.get().isOk());
    ASSERT_TRUE(value.isOk()) << value.status().toString();
    EXPECT_EQ(*value, "id");
    const std::vector<std::string> lines = linesWith(capture, "to publish 'nccl/unique_id'");
    ASSERT_GE(lines.size(), 2u);
    EXPECT_THAT(lines, Each(HasSubstr("attention rank 0 waiting for ffn rank 0 to publish 'nccl/unique_id' (")));
    EXPECT_THAT(lines, Each(HasSubstr(" of 5 s)")));
}

TEST(WaitReports, ARendezvousWithoutItsStoreSaysSoUntilTheTimeout) {
    core::LogCapture capture;
    const int port = pickFreePort();  // nobody hosts the store
    const auto start = Clock::now();
    const core::Status s =
        Rendezvous::join(rendezvousOptions(port, 1, 2, 450ms), {Role::kAttention, 0, kProtocolVersion, kFingerprint})
            .status();
    EXPECT_GE(Clock::now() - start, 450ms);
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), HasSubstr(fmt::format("rendezvous store (ffn rank 0 hosts it) at 127.0.0.1:{}", port)));
    const std::vector<std::string> lines = linesWith(capture, "to accept a connection");
    ASSERT_GE(lines.size(), 3u);
    for (const std::string& line : lines) {
        EXPECT_THAT(line,
                    HasSubstr(fmt::format(
                        "waiting for the rendezvous store (ffn rank 0 hosts it) at 127.0.0.1:{} to accept", port)));
        EXPECT_THAT(line, HasSubstr("of 450 ms; last error: Connection refused)"));
    }
}

TEST(WaitReports, WithoutAReportIntervalNothingIsLogged) {
    core::LogCapture capture;
    const int port = pickFreePort();
    RendezvousOptions o = rendezvousOptions(port, 1, 1, 300ms);
    o.report_interval = 0ms;
    EXPECT_EQ(Rendezvous::join(o, {Role::kAttention, 0, kProtocolVersion, kFingerprint}).status().code(),
              core::StatusCode::kTimeout);
    EXPECT_THAT(linesWith(capture, "waiting for"), IsEmpty());
}

TEST(WaitReports, AnFfnRankNamesThePeersThatHaveNotConnected) {
    core::LogCapture capture;
    auto listener = listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listener.isOk()) << listener.status().toString();
    const HostPort endpoint{"127.0.0.1", listener->port};
    const std::vector<int> expected = {0, 1, 2};
    const FrameLimits limits{16, 4096};
    const tcp::HandshakeIdentity self{Role::kFfn, 0, kFingerprint, limits};
    auto accepting = runAsync([&] {
        return tcp::acceptPeers(listener->fd.get(), endpoint.toString(), expected, self, deadlineAfter(900ms), nullptr,
                                kInterval)
            .status();
    });
    std::this_thread::sleep_for(350ms);
    auto hello = tcp::connectAndHello(endpoint, PeerInfo{Role::kFfn, 0, endpoint.toString()},
                                      {Role::kAttention, 1, kFingerprint, limits}, deadlineAfter(5s), nullptr);
    ASSERT_TRUE(hello.isOk()) << hello.status().toString();
    const core::Status s = accepting.get();
    EXPECT_EQ(s.code(), core::StatusCode::kTimeout);
    EXPECT_THAT(s.message(), HasSubstr("attention rank 0, attention rank 2 never connected"));

    const std::vector<std::string> lines = linesWith(capture, "to connect (");
    ASSERT_GE(lines.size(), 5u);
    const std::string prefix = fmt::format("ffn rank 0 listening on {}: waiting for ", endpoint.toString());
    EXPECT_THAT(lines.front(), HasSubstr(prefix + "attention ranks 0, 1, 2 (of its 3 peers) to connect ("));
    EXPECT_THAT(lines.back(), HasSubstr(prefix + "attention ranks 0, 2 (of its 3 peers) to connect ("));
    EXPECT_THAT(lines.back(), HasSubstr(" of 900 ms)"));
}

TEST(WaitReports, ConnectingReportsTheAddressAndTheLastError) {
    core::LogCapture capture;
    const int port = pickFreePort();
    const auto conn = connectTcp({"127.0.0.1", port}, deadlineAfter(350ms), nullptr, "ffn rank 3", kInterval);
    EXPECT_EQ(conn.status().code(), core::StatusCode::kTimeout);
    const std::vector<std::string> lines = linesWith(capture, "waiting for ffn rank 3");
    ASSERT_GE(lines.size(), 2u);
    EXPECT_THAT(lines, Each(HasSubstr(fmt::format("at 127.0.0.1:{} to accept a connection (", port))));
    EXPECT_THAT(lines, Each(HasSubstr("last error: Connection refused")));
    // A connect that succeeds at once says nothing.
    auto server = listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(server.isOk());
    ASSERT_TRUE(connectTcp({"127.0.0.1", server->port}, deadlineAfter(5s), nullptr, "quick peer", kInterval).isOk());
    EXPECT_THAT(linesWith(capture, "waiting for quick peer"), IsEmpty());
}

}  // namespace
}  // namespace afd::transport
