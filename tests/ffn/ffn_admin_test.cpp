// The FFN rank's admin server as an operator meets it: up before the weights load (/status says "loading" with the
// layers done), every port checked before any weight is read (a clash exits 2 naming the port and the flag), and
// POST /stop guarded by a token when the server binds a non-loopback address.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/afd_processes.h"
#include "common/subprocess_util.h"
#include "core/check.h"
#include "http/http_client.h"
#include "transport/socket.h"

namespace afd::ffn {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::readText;
using testing::TempDir;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";  // 3 layers

// {"afd": …} of a one-FFN deployment whose store is at 127.0.0.1:store_port.
std::string config(int store_port) {
    return fmt::format(R"({{"afd":{{"num_attention_ranks":1,"num_ffn_ranks":1,"port":{},"connect_timeout_s":60}}}})",
                       store_port);
}

struct Ffn {
    core::ChildProcess process;
    std::string log;
    std::string port_file;
    std::string status_file;
};

// `afd ffn` rank 0 of 1 with `extra` flags (after the model and config) and `env`.
Ffn startFfn(const TempDir& dir, int store_port, const std::vector<std::string>& extra,
             const std::vector<std::pair<std::string, std::string>>& env = {}) {
    Ffn f;
    f.log = dir.file("ffn.log");
    f.port_file = dir.file("ffn.port");
    f.status_file = dir.file("ffn.status.json");
    core::ChildProcess::Spec spec;
    spec.argv = {AFD_BINARY,          "ffn",       kTiny,           "--additional-config", config(store_port),
                 "--admin-port-file", f.port_file, "--status-file", f.status_file};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"AFD_NUM_THREADS", "1"}};
    spec.env.insert(spec.env.end(), env.begin(), env.end());
    spec.unset_env = {"AFD_ADMIN_TOKEN"};
    for (const auto& [name, value] : env) std::erase(spec.unset_env, name);
    spec.stderr_path = f.log;
    auto child = core::ChildProcess::spawn(spec);
    AFD_CHECK(child.isOk(), "{}", child.status().toString());
    f.process = std::move(child).value();
    return f;
}

int waitPort(Ffn& f) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string text = readText(f.port_file);
        if (!text.empty()) return std::stoi(text);
        if (f.process.poll()) return 0;
        std::this_thread::sleep_for(5ms);
    }
    return 0;
}

// An exit before the weights were read: exit 2, the message, and neither a load line nor a "loaded" line.
void expectRefusedBeforeLoading(Ffn& f, const std::string& needle) {
    const auto code = f.process.wait(30s);
    ASSERT_TRUE(code.has_value()) << "still running";
    const std::string log = readText(f.log);
    EXPECT_EQ(*code, 2) << log;
    EXPECT_NE(log.find(needle), std::string::npos) << log;
    EXPECT_EQ(log.find("loading weights"), std::string::npos) << log;
    EXPECT_EQ(log.find("loaded "), std::string::npos) << log;
    const json status = json::parse(readText(f.status_file), nullptr, false);
    ASSERT_FALSE(status.is_discarded()) << readText(f.status_file);
    EXPECT_EQ(status["exit_reason"], "config_error");
    EXPECT_EQ(status["weight_bytes"], 0);
}

// /health's answer once it is `want`, or its last answer when `timeout` has passed.
std::string waitHealth(int port, const std::string& want, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string answer = testing::httpGet(port, "/health").value_or("");
    while (answer != want && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
        answer = testing::httpGet(port, "/health").value_or("");
    }
    return answer;
}

std::optional<http::HttpResponse> postStop(int port, std::optional<std::string> token) {
    http::HttpClientOptions options;
    if (token) options.headers = {{"Authorization", "Bearer " + *token}};
    auto reply = http::HttpClient("127.0.0.1", port, options).post("/stop", "");
    if (!reply.isOk()) return std::nullopt;
    return *reply;
}

TEST(FfnAdmin, ATakenAdminPortExitsTwoNamingTheFlagBeforeAnyWeightIsRead) {
    TempDir dir;
    auto taken = transport::listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(taken.isOk()) << taken.status().toString();
    Ffn f = startFfn(dir, testing::freePort(), {"--admin-port", std::to_string(taken->port)});
    expectRefusedBeforeLoading(f, fmt::format("--admin-port {} (--admin-host 127.0.0.1)", taken->port));
    EXPECT_NE(readText(f.log).find("in use"), std::string::npos) << readText(f.log);
}

TEST(FfnAdmin, ATakenRendezvousPortExitsTwoNamingAfdPortBeforeAnyWeightIsRead) {
    TempDir dir;
    auto taken = transport::listenTcp("127.0.0.1", 0);
    ASSERT_TRUE(taken.isOk()) << taken.status().toString();
    Ffn f = startFfn(dir, taken->port, {"--admin-port", "0"});
    expectRefusedBeforeLoading(f, fmt::format("afd.port {} (afd.host 127.0.0.1): ffn rank 0 cannot host the "
                                              "rendezvous store there",
                                              taken->port));
    EXPECT_NE(readText(f.log).find("Address already in use"), std::string::npos) << readText(f.log);
}

TEST(FfnAdmin, StatusSaysLoadingWithTheLayersDoneWhileTheWeightsLoad) {
    TempDir dir;
    // 3 layers at 400 ms each: the load takes about 1.2 s.
    Ffn f = startFfn(dir, testing::freePort(), {"--admin-port", "0"}, {{"AFD_TEST_LOAD_DELAY_MS", "400"}});
    const int port = waitPort(f);
    ASSERT_GT(port, 0) << readText(f.log);
    std::vector<std::string> states;
    std::vector<int64_t> layers_done;
    int read_while_loading = 0;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto body = testing::httpGet(port, "/status");
        ASSERT_TRUE(body.has_value()) << "the admin server stopped answering: " << readText(f.log);
        const json s = json::parse(*body);
        const std::string state = s["state"];
        if (states.empty() || states.back() != state) states.push_back(state);
        if (state == "loading") {
            EXPECT_EQ(s["load"]["num_layers"], 3);
            EXPECT_FALSE(s["load"]["done"].get<bool>());
            EXPECT_EQ(s["weight_bytes"], 0);
            const int64_t done = s["load"]["layers_done"];
            if (layers_done.empty() || layers_done.back() != done) layers_done.push_back(done);
            // The load may end between these reads: they must say "loading" when /status still does after them
            // (the state never goes back to loading).
            const std::string ready = testing::httpGet(port, "/ready").value_or("");
            const std::string health = testing::httpGet(port, "/health").value_or("");
            const auto after = testing::httpGet(port, "/status");
            if (after.has_value() && json::parse(*after)["state"] == "loading") {
                EXPECT_EQ(ready, "loading\n");
                EXPECT_EQ(health, "ok loading\n");
                ++read_while_loading;
            }
        }
        // Loaded, a pool (--serve-sessions forever, the default) waits for its first session.
        if (state == "waiting_for_session") {
            EXPECT_TRUE(s["load"]["done"].get<bool>());
            EXPECT_EQ(s["load"]["layers_done"], 3);
            EXPECT_GT(s["weight_bytes"].get<int64_t>(), 0);
            break;
        }
        std::this_thread::sleep_for(20ms);
    }
    ASSERT_FALSE(states.empty());
    EXPECT_EQ(states.back(), "waiting_for_session") << readText(f.log);
    EXPECT_NE(std::find(states.begin(), states.end(), "loading"), states.end()) << readText(f.log);
    EXPECT_GE(layers_done.size(), 2u) << "the layers loaded move while loading";
    EXPECT_GE(read_while_loading, 1) << "/ready and /health were read while the weights loaded";
    f.process.signal(SIGTERM);
    EXPECT_EQ(f.process.wait(20s).value_or(-1), 0) << readText(f.log);
}

TEST(FfnAdmin, OffLoopbackTheAdminServerNeedsATokenBeforeAnyWeightIsRead) {
    TempDir dir;
    Ffn f = startFfn(dir, testing::freePort(), {"--admin-host", "0.0.0.0", "--admin-port", "0"});
    expectRefusedBeforeLoading(f,
                               "--admin-host 0.0.0.0 is not a loopback address: POST /stop needs a token there; "
                               "pass --admin-token TOKEN or set AFD_ADMIN_TOKEN");
}

TEST(FfnAdmin, OffLoopbackPostStopNeedsTheBearerToken) {
    for (const bool from_env : {false, true}) {
        SCOPED_TRACE(from_env ? "AFD_ADMIN_TOKEN" : "--admin-token");
        TempDir dir;
        std::vector<std::string> flags = {"--admin-host", "0.0.0.0", "--admin-port", "0"};
        std::vector<std::pair<std::string, std::string>> env;
        if (from_env) {
            env.emplace_back("AFD_ADMIN_TOKEN", "s3cret");
        } else {
            flags.insert(flags.end(), {"--admin-token", "s3cret"});
        }
        Ffn f = startFfn(dir, testing::freePort(), flags, env);
        const int port = waitPort(f);
        ASSERT_GT(port, 0) << readText(f.log);
        for (const std::optional<std::string>& wrong :
             {std::optional<std::string>(), std::optional<std::string>("x")}) {
            const auto refused = postStop(port, wrong);
            ASSERT_TRUE(refused.has_value());
            EXPECT_EQ(refused->status, 401) << refused->body;
        }
        // Reading needs no token; the rank is still up, and waits for its peers once its weights are loaded.
        EXPECT_EQ(waitHealth(port, "ok waiting_for_session\n", 30s), "ok waiting_for_session\n");
        EXPECT_FALSE(f.process.poll().has_value());
        const auto accepted = postStop(port, std::string("s3cret"));
        ASSERT_TRUE(accepted.has_value());
        EXPECT_EQ(accepted->status, 200);
        EXPECT_EQ(f.process.wait(20s).value_or(-1), 0) << readText(f.log);
        EXPECT_NE(readText(f.log).find("POST /stop from 127.0.0.1 refused: no admin token"), std::string::npos);
    }
}

TEST(FfnAdmin, OnLoopbackPostStopNeedsNoToken) {
    TempDir dir;
    Ffn f = startFfn(dir, testing::freePort(), {"--admin-port", "0"});
    const int port = waitPort(f);
    ASSERT_GT(port, 0) << readText(f.log);
    const auto accepted = postStop(port, std::nullopt);
    ASSERT_TRUE(accepted.has_value());
    EXPECT_EQ(accepted->status, 200);
    EXPECT_EQ(f.process.wait(20s).value_or(-1), 0) << readText(f.log);
}

}  // namespace
}  // namespace afd::ffn
