// The afd object `afd launch` gives its children (cli/launch_config.h), without starting any: cuda_ipc when every
// rank is on a GPU and the build has it, the user's connector kept as given, tcp for mixed CPU/GPU deployments; the
// launcher's other defaults (ranks, port) and its refusals stay as they were.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli/launch_config.h"
#include "transport/afd_config.h"

namespace afd::cli {
namespace {

using nlohmann::json;

constexpr LaunchConnectorChoice kAllOnGpus{.every_rank_on_cuda = true, .cuda_ipc_built = true};
constexpr LaunchConnectorChoice kMixed{.every_rank_on_cuda = false, .cuda_ipc_built = true};
constexpr LaunchConnectorChoice kNoCudaIpcInThisBuild{.every_rank_on_cuda = true, .cuda_ipc_built = false};

// The afd object of a launch, and the connector a child parses from it.
json afdOf(const std::string& additional_config, const LaunchConnectorChoice& choice) {
    auto root = launchAfdObject(additional_config, choice);
    EXPECT_TRUE(root.isOk()) << root.status().message();
    if (!root.isOk()) return json::object();
    EXPECT_EQ(root->size(), 1u) << root->dump();
    return root->at("afd");
}

std::string childConnector(json afd) {
    afd["role"] = "ffn";
    auto config = transport::AfdConfig::fromJson(afd.dump(), transport::Role::kFfn, "test");
    EXPECT_TRUE(config.isOk()) << config.status().message();
    return config.isOk() ? std::string(transport::connectorName(config->connector)) : "";
}

TEST(LaunchConfig, EveryRankOnAGpuDefaultsToCudaIpc) {
    for (const std::string text : {"", R"({"afd":{}})", R"({"afd":{"num_ffn_ranks":2,"num_attention_ranks":1}})"}) {
        const json afd = afdOf(text, kAllOnGpus);
        EXPECT_EQ(afd.value("connector", ""), "cuda_ipc") << text;
        EXPECT_EQ(childConnector(afd), "cuda_ipc") << text;
    }
}

TEST(LaunchConfig, TheUsersConnectorIsKept) {
    json afd = afdOf(R"({"afd":{"connector":"tcp"}})", kAllOnGpus);
    EXPECT_EQ(afd.value("connector", ""), "tcp");
    EXPECT_EQ(childConnector(afd), "tcp");
    // The alias, as given (adding "connector" beside it would be an error).
    afd = afdOf(R"({"afd":{"afd_connector":"tcp"}})", kAllOnGpus);
    EXPECT_FALSE(afd.contains("connector")) << afd.dump();
    EXPECT_EQ(afd.value("afd_connector", ""), "tcp");
    EXPECT_EQ(childConnector(afd), "tcp");
    afd = afdOf(R"({"afd":{"connector":"cuda_ipc"}})", kMixed);  // refused later by the CPU ranks, not changed here
    EXPECT_EQ(afd.value("connector", ""), "cuda_ipc");
}

TEST(LaunchConfig, MixedDeploymentsAndBuildsWithoutCudaIpcKeepTcp) {
    for (const auto& choice : {kMixed, kNoCudaIpcInThisBuild, LaunchConnectorChoice{}}) {
        const json afd = afdOf("", choice);
        EXPECT_FALSE(afd.contains("connector")) << afd.dump();
        EXPECT_EQ(childConnector(afd), "tcp");
    }
}

TEST(LaunchConfig, TheLaunchersOtherDefaultsStay) {
    const json afd = afdOf("", kAllOnGpus);
    EXPECT_EQ(afd.value("num_attention_ranks", 0), 1);
    EXPECT_EQ(afd.value("num_ffn_ranks", 0), 2);
    EXPECT_GT(afd.value("port", 0), 0);
    // p2p without counts keeps the config's 1A1F; a given port is kept.
    const json p2p = afdOf(R"({"afd":{"compute_gate_on_attention":false,"port":4321}})", kAllOnGpus);
    EXPECT_FALSE(p2p.contains("num_ffn_ranks")) << p2p.dump();
    EXPECT_EQ(p2p.value("port", 0), 4321);
    EXPECT_EQ(p2p.value("connector", ""), "cuda_ipc");
}

TEST(LaunchConfig, RefusesARoleAndWhatIsNotAnAfdObject) {
    for (const char* text : {R"({"afd":{"role":"attention"}})", R"({"afd":{"afd_role":"attention"}})"}) {
        const auto root = launchAfdObject(text, kAllOnGpus);
        ASSERT_FALSE(root.isOk()) << text;
        EXPECT_EQ(root.status().code(), core::StatusCode::kInvalidArgument);
        EXPECT_NE(root.status().message().find("implied by afd launch"), std::string::npos) << root.status().message();
    }
    for (const char* text : {"[1]", "{", R"({"afd":{"connector":"carrier-pigeon"}})", R"({"other":1})"}) {
        const auto root = launchAfdObject(text, kAllOnGpus);
        EXPECT_FALSE(root.isOk()) << text;
    }
}

}  // namespace
}  // namespace afd::cli
