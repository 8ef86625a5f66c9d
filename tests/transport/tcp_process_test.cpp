// An attention rank in a child process that is killed mid-step: the FFN rank in this process must report the
// lost peer within a second (the step timeout is far longer), not hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/tcp/tcp_connector.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;
using namespace afd::transport::testing;

const FrameSpec kSpec{{{core::DType::kF32, 16}}};

tcp::TcpConnectorOptions options(Role role, int port) {
    auto o = baseOptions(role, 0, 1, 1, port);
    o.peers = {0};
    o.step_timeout = 60s;
    return o;
}

// The child: one step, one verified round trip, a byte to the parent, then it waits to be killed.
[[noreturn]] void attentionChild(int port, int ready_fd) {
    auto connector = tcp::createAttentionConnector(options(Role::kAttention, port));
    if (!connector.isOk()) ::_exit(2);
    AttentionConnector& c = **connector;
    StepHeader header;
    if (!c.sendStep(header).isOk()) ::_exit(3);
    FramePayload out{5, {makeTensor(core::DType::kF32, 5, 16, 1)}};
    if (!c.dispatch({0, 0, 0}, std::span(&out, 1)).isOk()) ::_exit(4);
    auto frames = c.combine({0, 0, 0}, kSpec);
    if (!frames.isOk() || !compareTensor((*frames)[0].segments[0], core::DType::kF32, 5, 16, 2).empty()) ::_exit(5);
    const char ok = 'k';
    if (::write(ready_fd, &ok, 1) != 1) ::_exit(6);
    while (true) ::pause();
}

TEST(TcpProcess, KilledAttentionProcessIsReportedAsPeerLostWithinASecond) {
    const int port = pickFreePort();
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    core::UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        read_end.reset();
        attentionChild(port, write_end.get());
    }
    write_end.reset();
    struct Reaper {
        pid_t pid;
        ~Reaper() {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    } reaper{child};

    auto ffn = tcp::createFfnConnector(options(Role::kFfn, port));
    ASSERT_TRUE(ffn.isOk()) << ffn.status().toString();
    FfnConnector& c = **ffn;
    ASSERT_TRUE(c.receiveStep().isOk());
    auto frames = c.receive({0, 0, 0}, kSpec);
    ASSERT_TRUE(frames.isOk()) << frames.status().toString();
    EXPECT_EQ(compareTensor((*frames)[0].segments[0], core::DType::kF32, 5, 16, 1), "");
    FramePayload reply{5, {makeTensor(core::DType::kF32, 5, 16, 2)}};
    ASSERT_TRUE(c.send({0, 0, 0}, std::span(&reply, 1)).isOk());

    // The child checked the reply; now it sits mid-step while this rank waits for its next frame.
    pollfd pfd{read_end.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 30000), 1);
    char byte = 0;
    ASSERT_EQ(::read(read_end.get(), &byte, 1), 1);
    ASSERT_EQ(byte, 'k');

    auto receiving = runAsync([&c] { return c.receive({0, 1, 0}, kSpec).status(); });
    EXPECT_EQ(receiving.wait_for(50ms), std::future_status::timeout);  // the child is alive and silent
    const auto start = Clock::now();
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    ASSERT_EQ(receiving.wait_for(10s), std::future_status::ready);
    EXPECT_LT(Clock::now() - start, 1s);
    const core::Status s = receiving.get();
    EXPECT_EQ(s.code(), core::StatusCode::kPeerLost);
    EXPECT_THAT(s.message(), AllOf(StartsWith("attention rank 0 (127.0.0.1:"), HasSubstr("closed the connection")));
}

}  // namespace
}  // namespace afd::transport
