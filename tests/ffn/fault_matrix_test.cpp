// The fault matrix of docs/faults.md, on the CPU over the tcp connector with the tiny fixture, as separate `afd`
// processes: one role (the victim) gets SIGKILL, SIGTERM or SIGSTOP at one phase (before the rendezvous completes,
// while the FFN rank loads its weights, mid-step, during its shutdown), and the other role (the survivor) must end
// within its configured timeout plus a margin with the README's exit code and an error naming the peer, or, as an FFN
// pool serving sessions forever, record a failed session and go on serving. Phases are reached by observable events
// (a log line, the admin /status), never by a sleep. A stopped process is a slow peer: it gets SIGCONT (or SIGKILL)
// once the survivor has given up on it. Cells that other tests cover are referenced in docs/faults.md instead.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/afd_processes.h"
#include "common/build_slowdown.h"
#include "common/subprocess_util.h"

namespace afd::ffn {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::freePort;
using testing::readText;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
const std::string kPrompt = "3,17,99,250,7,42,311,5";
const std::vector<std::string> kLongRun = {"--ignore-eos", "--max-model-len", "4096"};
// The survivors' bounds, small so that a slow peer is given up on quickly (scaled in a sanitizer build, whose processes
// start, load and step that much slower).
constexpr int kConnectTimeoutS = 3 * testing::kBuildSlowdown;
constexpr int kStepTimeoutS = 2 * testing::kBuildSlowdown;
// Slack on top of a configured timeout for process start-up and exit on two shared cores.
constexpr auto kMargin = 4s * testing::kBuildSlowdown;
// A sleep after each of the fixture's 3 layers loads on the FFN rank, so that a test sees the `loading` state.
const std::vector<std::pair<std::string, std::string>> kSlowLoad = {
    {"AFD_TEST_LOAD_DELAY_MS", std::to_string(700 * testing::kBuildSlowdown)}};

std::string faultConfig(int port) {
    return fmt::format(R"({{"afd":{{"num_attention_ranks":1,"num_ffn_ranks":1,"port":{},)"
                       R"("connect_timeout_s":{},"step_timeout_s":{}}}}})",
                       port, kConnectTimeoutS, kStepTimeoutS);
}

enum class Victim { kFfn, kAttention };
enum class Phase { kBeforeRendezvous, kDuringLoad, kMidStep, kDuringShutdown };

struct Cell {
    Victim victim;
    int signal;
    Phase phase;
};

std::string signalName(int sig) { return sig == SIGKILL ? "Sigkill" : sig == SIGTERM ? "Sigterm" : "Sigstop"; }

std::string cellName(const Cell& c) {
    static const char* const kPhases[] = {"BeforeRendezvous", "DuringLoad", "MidStep", "DuringShutdown"};
    return fmt::format("{}{}{}", c.victim == Victim::kFfn ? "Ffn" : "Attention", signalName(c.signal),
                       kPhases[static_cast<int>(c.phase)]);
}

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The measured time to detect, for docs/faults.md.
void report(const std::string& what, double seconds) {
    ::testing::Test::RecordProperty(what, fmt::format("{:.2f}", seconds));
    std::cout << fmt::format("[fault matrix] {}: {:.2f} s\n", what, seconds);
}

bool waitFor(const std::function<bool()>& holds, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
        if (holds()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

bool waitLog(const std::string& path, const std::string& needle, std::chrono::milliseconds timeout = 30s) {
    return waitFor([&] { return readText(path).find(needle) != std::string::npos; }, timeout);
}

// Some process has an established connection to 127.0.0.1:`port` (/proc/net/tcp: "sl local rem st ...", addresses
// as hex "0100007F:PORT"). With one attention rank and FFN rank 0 still loading, that client is the attention rank.
bool clientConnectedTo(int port) {
    std::istringstream in(readText("/proc/net/tcp"));
    const std::string remote = fmt::format("0100007F:{:04X}", port);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string slot, local, rem, state;
        if ((fields >> slot >> local >> rem >> state) && rem == remote && state == "01") return true;
    }
    return false;
}

json statusOf(int admin_port) {
    const json s = json::parse(testing::httpGet(admin_port, "/status").value_or("{}"), nullptr, false);
    return s.is_discarded() ? json::object() : s;
}

bool waitStatus(int admin_port, const std::function<bool(const json&)>& holds, std::chrono::milliseconds timeout) {
    return waitFor(
        [&] {
            const json s = statusOf(admin_port);
            return !s.empty() && holds(s);
        },
        timeout);
}

bool servedSteps(const json& s) { return s.value("state", "") == "serving" && s.value("steps", 0) > 2; }

json statusFile(const testing::FfnProcess& ffn) {
    const json s = json::parse(readText(ffn.status_path), nullptr, false);
    return s.is_discarded() ? json::object() : s;
}

// The FFN rank stopped on SIGTERM or POST /stop: exit 0, and its status file says so with everything released.
void expectStoppedCleanly(testing::FfnProcess& ffn) {
    const auto code = ffn.process.wait(20s);
    ASSERT_TRUE(code.has_value()) << "the FFN rank did not stop within 20 s\n" << readText(ffn.log_path);
    EXPECT_EQ(*code, 0) << readText(ffn.log_path);
    const json status = statusFile(ffn);
    EXPECT_EQ(status.value("exit_reason", ""), "stopped") << status.dump();
    EXPECT_TRUE(status.value("resources_released", false)) << status.dump();
}

// The attention rank gave up on its FFN peer within `bound` of `since`: exit 3, the error naming what it lost.
void expectAttentionFailed(testing::AttentionProcess& attention, Clock::time_point since,
                           std::chrono::milliseconds bound, const std::string& needle, const std::string& what) {
    const auto code = attention.process.wait(bound + 2s);
    ASSERT_TRUE(code.has_value()) << "afd generate still running " << (bound + 2s).count() << " ms later\n"
                                  << readText(attention.log_path);
    const double detected = secondsSince(since);
    report(what, detected);
    EXPECT_LT(detected, std::chrono::duration<double>(bound).count());
    const std::string log = readText(attention.log_path);
    EXPECT_EQ(*code, 3) << log;
    EXPECT_NE(log.find(needle), std::string::npos) << log;
}

// The generate's JSON after a failure mid-generation: each prompt's partial ids with finish_reason "error".
void expectPartialResults(const testing::AttentionProcess& attention) {
    const json out = json::parse(readText(attention.out_path), nullptr, false);
    ASSERT_FALSE(out.is_discarded()) << "no JSON on stdout: " << readText(attention.out_path);
    ASSERT_EQ(out["results"].size(), 1u) << out.dump();
    EXPECT_EQ(out["results"][0]["finish_reason"], "error");
    EXPECT_NE(out.value("error", "").find("ffn rank 0"), std::string::npos) << out.value("error", "");
}

// ---- The FFN rank is the victim; `afd generate` (attention rank 0) survives. The rank serves one session.

void ffnBeforeRendezvous(int sig) {
    TempDir dir;
    const std::string cfg = faultConfig(freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1, testing::kOneSession);
    // Loaded, registered in session 1, waiting for its attention peer.
    ASSERT_TRUE(waitLog(ffn.log_path, "registered as ffn rank 0 in session 1")) << readText(ffn.log_path);
    ffn.process.signal(sig);
    if (sig == SIGTERM) {
        expectStoppedCleanly(ffn);
        EXPECT_EQ(statusFile(ffn).value("state", ""), "exited");
    }
    if (sig == SIGKILL) {
        ASSERT_TRUE(ffn.process.wait(10s).has_value());
    }
    // The attention rank comes to a store that is gone (SIGKILL, SIGTERM) or that answers nothing (SIGSTOP).
    const auto started = Clock::now();
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kPrompt}, 4);
    // A stopped store takes the request and never answers: the call fails at the rendezvous timeout.
    expectAttentionFailed(attention, started, std::chrono::seconds(kConnectTimeoutS) + kMargin,
                          sig == SIGSTOP ? "rendezvous store at 127.0.0.1" : "rendezvous at 127.0.0.1",
                          "attention gives up on the rendezvous");
    if (sig == SIGSTOP) {
        // Woken past its own rendezvous deadline, the rank (serving one session) either sees that its session's
        // rendezvous timed out (exit 3 naming the attention rank) or takes the SIGTERM first (exit 0); either way it
        // ends at once and writes its status file.
        ffn.process.signal(SIGCONT);
        ffn.process.signal(SIGTERM);
        const auto code = ffn.process.wait(10s);
        ASSERT_TRUE(code.has_value()) << readText(ffn.log_path);
        EXPECT_TRUE(*code == 0 || *code == 3) << *code << "\n" << readText(ffn.log_path);
        const json status = statusFile(ffn);
        EXPECT_EQ(status.value("exit_reason", ""), *code == 0 ? "stopped" : "connect_error") << status.dump();
        if (*code == 3) {
            EXPECT_NE(status.value("error", "").find("attention rank 0"), std::string::npos) << status.dump();
        }
    }
}

void ffnDuringLoad(int sig) {
    TempDir dir;
    const int port = freePort();
    const std::string cfg = faultConfig(port);
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1, testing::kOneSession, kSlowLoad);
    ASSERT_GT(testing::waitAdminPort(ffn), 0) << readText(ffn.log_path);
    // The attention rank connects to the store, which FFN rank 0 hosts from before its load, and waits there for the
    // session to open (rank 0 opens it once loaded).
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kPrompt}, 4);
    ASSERT_TRUE(waitFor([&] { return clientConnectedTo(port); }, 30s)) << readText(attention.log_path);
    const json status = statusOf(ffn.admin_port);
    ASSERT_EQ(status.value("state", ""), "loading") << status.dump();
    ASSERT_FALSE(status["load"].value("done", true)) << status.dump();
    ffn.process.signal(sig);
    const auto signalled = Clock::now();
    if (sig == SIGTERM) {
        // The load ends after the layer in hand, not after the rest of the model.
        expectStoppedCleanly(ffn);
        const std::string log = readText(ffn.log_path);
        EXPECT_NE(log.find("the weights' load was stopped after"), std::string::npos) << log;
        EXPECT_EQ(log.find("bytes of weights (experts"), std::string::npos) << log;
    }
    expectAttentionFailed(attention, signalled, std::chrono::seconds(kConnectTimeoutS) + kMargin,
                          "rendezvous at 127.0.0.1", "attention detects the loss during the FFN load");
    if (sig == SIGSTOP) {
        ffn.process.signal(SIGCONT);
        ffn.process.signal(SIGTERM);
        expectStoppedCleanly(ffn);
    }
}

// Mid-step, and after POST /stop (the rank is then in its shutdown: it finishes the step in flight and stops).
void ffnServing(int sig, bool stop_first) {
    TempDir dir;
    const std::string cfg = faultConfig(freePort());
    auto ffn = testing::startFfn(dir.path(), kTiny, cfg, 0, 1, testing::kOneSession);
    ASSERT_GT(testing::waitAdminPort(ffn), 0) << readText(ffn.log_path);
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kPrompt}, 4000, kLongRun);
    ASSERT_TRUE(waitStatus(ffn.admin_port, servedSteps, 30s)) << readText(attention.log_path);
    if (stop_first) {
        ASSERT_TRUE(testing::httpPostStop(ffn.admin_port));
    }
    ffn.process.signal(sig);
    const auto signalled = Clock::now();
    if (sig == SIGTERM) expectStoppedCleanly(ffn);
    const auto bound = (sig == SIGSTOP ? std::chrono::seconds(kStepTimeoutS) : 0s) + kMargin;
    expectAttentionFailed(
        attention, signalled, bound, "ffn rank 0",
        stop_first ? "attention detects the loss during the FFN shutdown" : "attention detects the loss mid-step");
    expectPartialResults(attention);
    if (sig == SIGSTOP) {
        ffn.process.signal(SIGCONT);
        if (stop_first) {
            expectStoppedCleanly(ffn);  // the stop it was asked for goes on
        } else {
            // Woken, it finds its only attention peer gone: the session failed, and with it this rank.
            const auto code = ffn.process.wait(10s + std::chrono::seconds(kStepTimeoutS));
            ASSERT_TRUE(code.has_value()) << readText(ffn.log_path);
            EXPECT_EQ(*code, 3) << readText(ffn.log_path);
            const json status = statusFile(ffn);
            EXPECT_EQ(status.value("exit_reason", ""), "peer_lost") << status.dump();
            EXPECT_NE(status.value("error", "").find("attention rank 0"), std::string::npos) << status.dump();
            EXPECT_TRUE(status.value("resources_released", false)) << status.dump();
        }
    }
}

// ---- The attention rank (`afd generate`) is the victim; an FFN pool (sessions forever, the default) survives.

bool poolWaiting(const json& s, int failed) {
    return s.value("state", "") == "waiting_for_session" && s["sessions"].value("failed", -1) == failed;
}

// The pool is not wedged by what happened: the next generate against it works.
void expectPoolServesTheNextGenerate(testing::FfnProcess& pool, const std::string& cfg) {
    TempDir other;  // its own output files
    auto next = testing::startAttention(other.path(), kTiny, cfg, 0, {kPrompt}, 4);
    const auto code = next.process.wait(60s);
    EXPECT_EQ(code.value_or(-1), 0) << readText(next.log_path) << readText(pool.log_path);
    EXPECT_FALSE(pool.process.poll().has_value());
}

void expectFailedSessionNamingTheAttentionRank(const testing::FfnProcess& pool, const json& s) {
    EXPECT_EQ(s["sessions"]["last"].value("result", ""), "failed") << s.dump();
    EXPECT_NE(s["sessions"]["last"].value("error", "").find("attention rank 0"), std::string::npos) << s.dump();
    const json file = statusFile(pool);  // written after each session, while the pool runs
    EXPECT_EQ(file.value("state", ""), "waiting_for_session") << file.dump();
    EXPECT_EQ(file.value("exit_reason", "?"), "") << file.dump();
}

void attentionBeforeRendezvous(int sig) {
    TempDir dir;
    const int port = freePort();
    const std::string cfg = faultConfig(port);
    auto pool = testing::startFfn(dir.path(), kTiny, cfg, 0, 1, {}, kSlowLoad);
    ASSERT_GT(testing::waitAdminPort(pool), 0) << readText(pool.log_path);
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kPrompt}, 4);
    // At the store, waiting for the session that FFN rank 0 opens once loaded: the rendezvous has not begun.
    ASSERT_TRUE(waitFor([&] { return clientConnectedTo(port); }, 30s)) << readText(attention.log_path);
    ASSERT_EQ(statusOf(pool.admin_port).value("state", ""), "loading");
    attention.process.signal(sig);
    const auto signalled = Clock::now();
    if (sig != SIGSTOP) {
        ASSERT_EQ(attention.process.wait(10s).value_or(-1), 128 + sig);
        // It never registered: the pool's session is neither blocked on it nor failed by it.
        ASSERT_TRUE(waitStatus(
            pool.admin_port, [](const json& s) { return poolWaiting(s, 0); }, 30s))
            << statusOf(pool.admin_port).dump() << readText(pool.log_path);
        report("pool back to waiting after the load", secondsSince(signalled));
    } else {
        // Stopped before it registered: the pool opens the session and waits for attention rank 0 without a deadline
        // (a pool's set-up is counted from attention rank 0's arrival), as it would for a rank not yet started.
        ASSERT_TRUE(waitStatus(
            pool.admin_port, [](const json& s) { return poolWaiting(s, 0); }, 30s))
            << statusOf(pool.admin_port).dump() << readText(pool.log_path);
        std::this_thread::sleep_for(std::chrono::seconds(kConnectTimeoutS) + 1s);  // past any set-up deadline
        const json s = statusOf(pool.admin_port);
        EXPECT_TRUE(poolWaiting(s, 0)) << s.dump();
        EXPECT_EQ(s["sessions"].value("current", -1), 1) << s.dump();
        attention.process.signal(SIGKILL);
        ASSERT_TRUE(attention.process.wait(10s).has_value());
    }
    expectPoolServesTheNextGenerate(pool, cfg);
    ASSERT_TRUE(testing::httpPostStop(pool.admin_port));
    expectStoppedCleanly(pool);
}

void attentionMidStep(int sig) {
    TempDir dir;
    const std::string cfg = faultConfig(freePort());
    auto pool = testing::startFfn(dir.path(), kTiny, cfg, 0, 1);
    ASSERT_GT(testing::waitAdminPort(pool), 0) << readText(pool.log_path);
    auto attention = testing::startAttention(dir.path(), kTiny, cfg, 0, {kPrompt}, 4000, kLongRun);
    ASSERT_TRUE(waitStatus(pool.admin_port, servedSteps, 30s)) << readText(attention.log_path);
    attention.process.signal(sig);
    const auto signalled = Clock::now();
    if (sig == SIGTERM) {
        // `afd generate` has no SIGTERM handler: it dies of it, and its sockets close as on SIGKILL.
        ASSERT_EQ(attention.process.wait(10s).value_or(-1), 128 + SIGTERM);
        ASSERT_TRUE(waitStatus(
            pool.admin_port, [](const json& s) { return poolWaiting(s, 1); }, kMargin))
            << statusOf(pool.admin_port).dump() << readText(pool.log_path);
        report("pool fails the session of a terminated attention rank", secondsSince(signalled));
    } else {
        // Stopped inside a step, the pool's step timeout fails the session; stopped between two steps, the pool
        // waits for the next step without a deadline (an idle attention rank looks the same), until the SIGKILL.
        const bool timed_out = waitStatus(
            pool.admin_port, [](const json& s) { return poolWaiting(s, 1); },
            std::chrono::seconds(kStepTimeoutS) + kMargin);
        report(timed_out ? "pool's step timeout fails the session of a stopped attention rank"
                         : "pool still waits for a stopped attention rank between steps",
               secondsSince(signalled));
        if (timed_out) {
            EXPECT_NE(statusOf(pool.admin_port)["sessions"]["last"].value("error", "").find("timed out"),
                      std::string::npos)
                << statusOf(pool.admin_port).dump();
        } else {
            EXPECT_EQ(statusOf(pool.admin_port).value("state", ""), "serving");
        }
        attention.process.signal(SIGKILL);
        ASSERT_TRUE(attention.process.wait(10s).has_value());
        ASSERT_TRUE(waitStatus(
            pool.admin_port, [](const json& s) { return poolWaiting(s, 1); }, kMargin))
            << statusOf(pool.admin_port).dump() << readText(pool.log_path);
    }
    expectFailedSessionNamingTheAttentionRank(pool, statusOf(pool.admin_port));
    expectPoolServesTheNextGenerate(pool, cfg);
    ASSERT_TRUE(testing::httpPostStop(pool.admin_port));
    expectStoppedCleanly(pool);
}

class FaultMatrix : public ::testing::TestWithParam<Cell> {};

TEST_P(FaultMatrix, SurvivorEndsWithinItsTimeoutNamingThePeer) {
    const Cell c = GetParam();
    if (c.victim == Victim::kFfn) {
        switch (c.phase) {
            case Phase::kBeforeRendezvous:
                return ffnBeforeRendezvous(c.signal);
            case Phase::kDuringLoad:
                return ffnDuringLoad(c.signal);
            case Phase::kMidStep:
                return ffnServing(c.signal, false);
            case Phase::kDuringShutdown:
                return ffnServing(c.signal, true);
        }
    }
    switch (c.phase) {
        case Phase::kBeforeRendezvous:
            return attentionBeforeRendezvous(c.signal);
        case Phase::kMidStep:
            return attentionMidStep(c.signal);
        case Phase::kDuringLoad:
            GTEST_SKIP() << "not reachable: `afd generate` loads before it contacts any peer, logs nothing while it "
                            "loads and has no load hook, and the fixture loads in milliseconds; a rank killed then "
                            "is, to its peers, one that never started";
        case Phase::kDuringShutdown:
            GTEST_SKIP() << "not reachable: `afd generate` announces its shutdown and closes its connections in "
                            "one step after the last token, with no observable event in between";
    }
}

// SIGKILL mid-step of either role is covered elsewhere (docs/faults.md names the tests).
INSTANTIATE_TEST_SUITE_P(
    Afd, FaultMatrix,
    ::testing::Values(
        Cell{Victim::kFfn, SIGKILL, Phase::kBeforeRendezvous}, Cell{Victim::kFfn, SIGTERM, Phase::kBeforeRendezvous},
        Cell{Victim::kFfn, SIGSTOP, Phase::kBeforeRendezvous}, Cell{Victim::kFfn, SIGKILL, Phase::kDuringLoad},
        Cell{Victim::kFfn, SIGTERM, Phase::kDuringLoad}, Cell{Victim::kFfn, SIGSTOP, Phase::kDuringLoad},
        Cell{Victim::kFfn, SIGTERM, Phase::kMidStep}, Cell{Victim::kFfn, SIGSTOP, Phase::kMidStep},
        Cell{Victim::kFfn, SIGKILL, Phase::kDuringShutdown}, Cell{Victim::kFfn, SIGTERM, Phase::kDuringShutdown},
        Cell{Victim::kFfn, SIGSTOP, Phase::kDuringShutdown},
        Cell{Victim::kAttention, SIGKILL, Phase::kBeforeRendezvous},
        Cell{Victim::kAttention, SIGTERM, Phase::kBeforeRendezvous},
        Cell{Victim::kAttention, SIGSTOP, Phase::kBeforeRendezvous},
        Cell{Victim::kAttention, SIGKILL, Phase::kDuringLoad}, Cell{Victim::kAttention, SIGTERM, Phase::kMidStep},
        Cell{Victim::kAttention, SIGSTOP, Phase::kMidStep}, Cell{Victim::kAttention, SIGKILL, Phase::kDuringShutdown}),
    [](const auto& info) { return cellName(info.param); });

}  // namespace
}  // namespace afd::ffn
