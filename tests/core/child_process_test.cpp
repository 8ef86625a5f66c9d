#include "core/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace afd::core {
namespace {

using namespace std::chrono_literals;

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ChildProcess, ExitCodeOutputAndEnvironment) {
    ::setenv("AFD_TEST_DROPPED", "x", 1);
    ChildProcess::Spec spec;
    spec.argv = {"/bin/sh", "-c", "echo \"$AFD_TEST_SET|${AFD_TEST_DROPPED:-gone}\"; exit 3"};
    spec.env = {{"AFD_TEST_SET", "hello"}};
    spec.unset_env = {"AFD_TEST_DROPPED"};
    spec.stdout_path = "/tmp/afd_child_process_test.out";
    auto child = ChildProcess::spawn(spec);
    ASSERT_TRUE(child.isOk());
    EXPECT_EQ(child->wait(10s), 3);
    EXPECT_EQ(slurp(spec.stdout_path), "hello|gone\n");
    ::unsetenv("AFD_TEST_DROPPED");
}

TEST(ChildProcess, TerminateAndDestructorLeaveNoProcessBehind) {
    ChildProcess::Spec spec;
    spec.argv = {"/bin/sleep", "30"};
    auto child = ChildProcess::spawn(spec);
    ASSERT_TRUE(child.isOk());
    EXPECT_FALSE(child->poll().has_value());
    EXPECT_EQ(child->terminate(5s), 128 + SIGTERM);
    pid_t pid = 0;
    {
        auto other = ChildProcess::spawn(spec);
        ASSERT_TRUE(other.isOk());
        pid = other->pid();
        ChildProcess moved = std::move(other).value();
        EXPECT_EQ(moved.pid(), pid);
    }  // destroyed while running: killed and reaped
    EXPECT_EQ(::kill(pid, 0), -1);
}

TEST(ChildProcess, MissingProgramExits127) {
    ChildProcess::Spec spec;
    spec.argv = {"/nonexistent/afd-program"};
    auto child = ChildProcess::spawn(spec);
    ASSERT_TRUE(child.isOk());
    EXPECT_EQ(child->wait(10s), 127);
}

}  // namespace
}  // namespace afd::core
