// The connector factory: the capability table (only what this build has), checkConnectorUsable for each kind and
// device, request validation and what a request derives, the tcp backend's mapping, and whole exchanges of both
// roles made through the factory.
#include "transport/connector_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "transport/afd_wire.h"
#include "transport/exchange_test_util.h"
#include "transport/tcp/tcp_backend.h"
#include "transport/transport_test_util.h"

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using namespace afd::transport::testing;

AfdConfig config(const std::string& json, Role role) {
    auto afd = AfdConfig::fromJson(json, role, "test");
    AFD_CHECK_OK(afd.status());
    return *afd;
}

ConnectorRequest request(const std::string& json, Role role, int rank) {
    ConnectorRequest r;
    r.afd = config(json, role);
    r.role = role;
    r.rank = rank;
    r.model_fingerprint = "model-fp";
    r.hidden_size = 64;
    r.experts_per_token = 4;
    return r;
}

TEST(ConnectorFactory, TheCapabilityTableListsOnlyTheBuiltConnectors) {
    const std::vector<ConnectorCapabilities> built = builtConnectors();
    size_t expected = 1;
#if AFD_HAVE_CUDA
    ++expected;
#endif
#if AFD_HAVE_NCCL
    ++expected;
#endif
    ASSERT_EQ(built.size(), expected);
    const ConnectorCapabilities& tcp = built[0];
    EXPECT_EQ(tcp.kind, ConnectorKind::kTcp);
    EXPECT_EQ(tcp.memory, ConnectorMemory::kHost);
    EXPECT_FALSE(tcp.needsCudaDevice());
    EXPECT_FALSE(tcp.graph_capturable);
    EXPECT_TRUE(tcp.cross_host);
    EXPECT_TRUE(tcp.ranks_may_share_gpu);
    ASSERT_TRUE(connectorCapabilities(ConnectorKind::kTcp).has_value());
    EXPECT_EQ(connectorCapabilities(ConnectorKind::kTcp)->memory, ConnectorMemory::kHost);
#if AFD_HAVE_CUDA
    // cuda_ipc: device memory between the processes of one host, capturable, ranks may share a GPU.
    const ConnectorCapabilities& ipc = built[1];
    EXPECT_EQ(ipc.kind, ConnectorKind::kCudaIpc);
    EXPECT_EQ(ipc.memory, ConnectorMemory::kDevice);
    EXPECT_TRUE(ipc.needsCudaDevice());
    EXPECT_TRUE(ipc.graph_capturable);
    EXPECT_FALSE(ipc.cross_host);
    EXPECT_TRUE(ipc.ranks_may_share_gpu);
#if AFD_HAVE_NCCL
    // nccl: device memory, any hosts, capturable; two ranks of one communicator never share a GPU.
    const ConnectorCapabilities& nccl = built[2];
    EXPECT_EQ(nccl.kind, ConnectorKind::kNccl);
    EXPECT_EQ(nccl.memory, ConnectorMemory::kDevice);
    EXPECT_TRUE(nccl.graph_capturable);
    EXPECT_TRUE(nccl.cross_host);
    EXPECT_FALSE(nccl.ranks_may_share_gpu);
    EXPECT_EQ(builtConnectorNames(), "tcp, cuda_ipc, nccl");
#else
    EXPECT_EQ(builtConnectorNames(), "tcp, cuda_ipc");
    EXPECT_FALSE(connectorCapabilities(ConnectorKind::kNccl).has_value());
#endif
#else
    EXPECT_EQ(builtConnectorNames(), "tcp");
    EXPECT_FALSE(connectorCapabilities(ConnectorKind::kCudaIpc).has_value());
#endif
}

TEST(ConnectorFactory, EachKindOnEachDeviceForBothRoles) {
    for (const Role role : {Role::kAttention, Role::kFfn}) {
        for (const core::Device device : {core::Device::cpu(), core::Device::cuda(0), core::Device::cuda(3)}) {
            const std::string where = fmt::format("{} on {}", roleName(role), device.toString());
            EXPECT_TRUE(checkConnectorUsable(config(R"({"connector":"tcp"})", role), role, device).isOk()) << where;
            for (const char* kind : {"cuda_ipc", "nccl"}) {
                const core::Status s =
                    checkConnectorUsable(config(fmt::format(R"({{"connector":"{}"}})", kind), role), role, device);
                if (connectorCapabilities(*parseConnector(kind)).has_value()) {
                    // Built: a device-memory connector serves GPU ranks only.
                    if (device.isCpu()) {
                        EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << where << " " << kind;
                        EXPECT_THAT(s.message(),
                                    HasSubstr(fmt::format("afd.connector \"{}\" moves device memory", kind)));
                    } else {
                        EXPECT_TRUE(s.isOk()) << where << " " << kind << ": " << s.toString();
                    }
                    continue;
                }
                EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << where << " " << kind;
                EXPECT_EQ(s.message(), fmt::format("afd.connector \"{}\": this build's connectors are: {}", kind,
                                                   builtConnectorNames()))
                    << where;
            }
        }
    }
}

TEST(ConnectorFactory, ADeviceMemoryConnectorNeedsACudaDeviceOnEveryRank) {
    // The rule every device-memory backend meets (checked on a made-up entry, whatever this build has).
    ConnectorCapabilities device_memory;
    device_memory.kind = ConnectorKind::kNccl;
    device_memory.memory = ConnectorMemory::kDevice;
    EXPECT_TRUE(device_memory.needsCudaDevice());
    for (const Role role : {Role::kAttention, Role::kFfn}) {
        const core::Status cpu = checkCapabilitiesAllow(device_memory, role, core::Device::cpu());
        EXPECT_EQ(cpu.code(), core::StatusCode::kInvalidArgument);
        EXPECT_THAT(cpu.message(), AllOf(HasSubstr("afd.connector \"nccl\" moves device memory"),
                                         HasSubstr("every rank needs a CUDA device (--device cuda)"),
                                         HasSubstr(fmt::format("this {} rank runs on the CPU", roleName(role)))));
        EXPECT_TRUE(checkCapabilitiesAllow(device_memory, role, core::Device::cuda(1)).isOk());
        EXPECT_TRUE(
            checkCapabilitiesAllow(*connectorCapabilities(ConnectorKind::kTcp), role, core::Device::cpu()).isOk());
    }
}

TEST(ConnectorFactory, ADeviceConnectorBoundsThePeersOfEachRank) {
    // The peer counts are checked for the whole deployment before the device, so every rank of a config refuses it
    // alike, CPU ranks included; tcp has no bound.
    struct Case {
        int attention, ffn;
        const char* mode;
        std::string needle;  // empty: accepted
    } cases[] = {
        {kMaxDevicePeers, 1, "m2n", ""},
        {kMaxDevicePeers + 1, 1, "m2n",
         fmt::format("afd.num_attention_ranks {0} with afd.num_ffn_ranks 1 (m2n): an FFN rank would serve {0} "
                     "attention ranks, but over afd.connector",
                     kMaxDevicePeers + 1)},
        {1, kMaxDevicePeers, "m2n", ""},
        {1, kMaxDevicePeers + 1, "m2n",
         fmt::format("afd.num_ffn_ranks {0} (m2n): an attention rank would add the partial sums of {0} FFN ranks",
                     kMaxDevicePeers + 1)},
        // p2p: FFN rank k serves a block of ceil(A/F) attention ranks at most; an attention rank talks to one.
        {2 * kMaxDevicePeers, 2, "p2p", ""},
        {2 * kMaxDevicePeers + 1, 2, "p2p",
         fmt::format("(p2p): an FFN rank would serve {} attention ranks", kMaxDevicePeers + 1)},
        {40, 40, "p2p", ""},
    };
    for (const char* kind : {"cuda_ipc", "nccl"}) {
        if (!connectorCapabilities(*parseConnector(kind))) continue;
        for (const Role role : {Role::kAttention, Role::kFfn}) {
            for (const Case& c : cases) {
                const std::string json = fmt::format(
                    R"({{"connector":"{}","num_attention_ranks":{},"num_ffn_ranks":{},"compute_gate_on_attention":{}}})",
                    kind, c.attention, c.ffn, std::string(c.mode) == "m2n" ? "true" : "false");
                const std::string where =
                    fmt::format("{} {} {}A{}F {}", kind, roleName(role), c.attention, c.ffn, c.mode);
                const core::Status s = checkConnectorUsable(config(json, role), role, core::Device::cuda(0));
                if (c.needle.empty()) {
                    EXPECT_TRUE(s.isOk()) << where << ": " << s.toString();
                    continue;
                }
                EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << where;
                EXPECT_THAT(s.message(), HasSubstr(c.needle)) << where;
                EXPECT_THAT(s.message(), HasSubstr(fmt::format("at most {}", kMaxDevicePeers))) << where;
                EXPECT_THAT(s.message(), HasSubstr(fmt::format("afd.connector \"{}\"", kind))) << where;
                // Named before the device: a CPU rank gets the same message.
                EXPECT_EQ(checkConnectorUsable(config(json, role), role, core::Device::cpu()).message(), s.message());
            }
        }
    }
    const std::string tcp = R"({"connector":"tcp","num_attention_ranks":40,"num_ffn_ranks":20})";
    for (const Role role : {Role::kAttention, Role::kFfn}) {
        EXPECT_TRUE(checkConnectorUsable(config(tcp, role), role, core::Device::cpu()).isOk());
    }
}

TEST(ConnectorFactory, ARequestDerivesPeersFingerprintAndFrameBytes) {
    const ConnectorRequest m2n =
        request(R"({"num_attention_ranks":2,"num_ffn_ranks":3,"max_num_tokens":16})", Role::kAttention, 1);
    ASSERT_TRUE(validateRequest(m2n).isOk()) << validateRequest(m2n).toString();
    EXPECT_EQ(m2n.peers(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(m2n.deploymentFingerprint(), "model-fp | tcp/m2n/2A3F/t16");
    EXPECT_EQ(m2n.maxFrameBytes(), 16u * (64 * 4 + 4 * 4 + 4 * 4));
    EXPECT_EQ(m2n.maxFrameBytes(), m2nDispatchSpec(64, 4).rowBytes() * 16);

    ConnectorRequest p2p =
        request(R"({"num_attention_ranks":3,"num_ffn_ranks":2,"compute_gate_on_attention":false,"max_num_tokens":8})",
                Role::kFfn, 1);
    p2p.experts_per_token = 0;  // unused in p2p
    ASSERT_TRUE(validateRequest(p2p).isOk()) << validateRequest(p2p).toString();
    EXPECT_EQ(p2p.peers(), (std::vector<int>{2}));
    EXPECT_EQ(p2p.maxFrameBytes(), 8u * 64 * 4);
    EXPECT_EQ(p2p.deploymentFingerprint(), "model-fp | tcp/p2p/3A2F/t8");
}

TEST(ConnectorFactory, ValidateRequestNamesWhatIsWrong) {
    const auto expectInvalid = [](const ConnectorRequest& r, const std::string& needle) {
        const core::Status s = validateRequest(r);
        EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << needle;
        EXPECT_THAT(s.message(), HasSubstr(needle));
    };
    const ConnectorRequest good = request(R"({"num_ffn_ranks":2})", Role::kFfn, 1);
    ASSERT_TRUE(validateRequest(good).isOk());
    ConnectorRequest r = good;
    r.role = Role::kAttention;
    expectInvalid(r, "carries an afd.role of ffn");
    r = good;
    r.rank = 2;
    expectInvalid(r, "ffn rank 2 must be in [0, 2)");
    r = good;
    r.model_fingerprint.clear();
    expectInvalid(r, "model fingerprint is empty");
    r = good;
    r.hidden_size = 0;
    expectInvalid(r, "hidden_size 0");
    r = good;
    r.experts_per_token = 0;
    expectInvalid(r, "experts_per_token 0");
    // A CPU rank (the request's device) with nccl: refused as unbuilt, or as device memory on the CPU.
    r = request(R"({"connector":"nccl"})", Role::kFfn, 0);
    expectInvalid(r, connectorCapabilities(ConnectorKind::kNccl)
                         ? std::string("afd.connector \"nccl\" moves device memory")
                         : "afd.connector \"nccl\": this build's connectors are: " + builtConnectorNames());
}

TEST(ConnectorFactory, MakersRefuseBeforeTouchingTheNetwork) {
    // Port 1 on a host that does not resolve: a maker that tried to connect would fail differently, or hang.
    const std::string json = R"({"connector":"cuda_ipc","host":"no-such-host.invalid","port":1})";
    auto ffn = makeFfnConnector(request(json, Role::kFfn, 0));
    EXPECT_EQ(ffn.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(ffn.status().message(), HasSubstr("afd.connector \"cuda_ipc\""));
    auto attention = makeAttentionConnector(request(json, Role::kAttention, 0));
    EXPECT_EQ(attention.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(attention.status().message(), HasSubstr("afd.connector \"cuda_ipc\""));
    auto wrong_role = makeAttentionConnector(request(R"({})", Role::kFfn, 0));
    EXPECT_THAT(wrong_role.status().message(), HasSubstr("makeAttentionConnector called for the ffn role"));
}

TEST(ConnectorFactory, TheTcpBackendMapsTheRequest) {
    const ConnectorRequest r = request(
        R"({"host":"10.1.2.3","port":4567,"num_ffn_ranks":2,"max_num_tokens":32,"connect_timeout_s":7,
            "step_timeout_s":9,"connector_extra_config":{"bind_host":"0.0.0.0","advertise_host":"10.1.2.4"}})",
        Role::kFfn, 1);
    const tcp::TcpConnectorOptions o = tcp::optionsFor(r);
    EXPECT_EQ(o.role, Role::kFfn);
    EXPECT_EQ(o.rank, 1);
    EXPECT_EQ(o.num_attention_ranks, 1);
    EXPECT_EQ(o.num_ffn_ranks, 2);
    EXPECT_EQ(o.peers, std::vector<int>{0});
    EXPECT_EQ(o.store_host, "10.1.2.3");
    EXPECT_EQ(o.store_port, 4567);
    EXPECT_EQ(o.bind_host, "0.0.0.0");
    EXPECT_EQ(o.advertise_host, "10.1.2.4");
    EXPECT_EQ(o.fingerprint, r.deploymentFingerprint());
    EXPECT_EQ(o.rendezvous_timeout, 7s);
    EXPECT_EQ(o.step_timeout, 9s);
    EXPECT_EQ(o.max_rows, 32u);
    EXPECT_EQ(o.max_frame_bytes, r.maxFrameBytes());
    EXPECT_TRUE(tcp::validateOptions(o).isOk()) << tcp::validateOptions(o).toString();
    // Without extra config the connector's defaults stay.
    const tcp::TcpConnectorOptions plain = tcp::optionsFor(request(R"({})", Role::kFfn, 0));
    EXPECT_EQ(plain.bind_host, tcp::TcpConnectorOptions{}.bind_host);
    EXPECT_EQ(plain.advertise_host, "");
}

TEST(ConnectorFactory, BothRolesMadeThroughTheFactoryExchangeWholeSteps) {
    constexpr int kHidden = 48, kTopK = 2, kRows = 12;
    const std::string json = fmt::format(
        R"({{"port":{},"num_attention_ranks":2,"num_ffn_ranks":2,"max_num_tokens":{},"connect_timeout_s":30}})",
        pickFreePort(), kRows);
    const auto make = [&](Role role, int rank) {
        ConnectorRequest r = request(json, role, rank);
        r.hidden_size = kHidden;
        r.experts_per_token = kTopK;
        return r;
    };
    ExchangePlan plan;
    plan.steps = {{0, 1, kStepWarmup}, {1, 2, 0}, {2, 1, 0}};
    plan.layers = {0, 1, 3};
    plan.a2f = m2nDispatchSpec(kHidden, kTopK);
    plan.f2a = hiddenSpec(kHidden);
    plan.max_rows = kRows;
    std::vector<std::future<FfnLog>> ffn;
    for (int f = 0; f < 2; ++f) {
        ffn.push_back(runAsync([&, f] {
            auto connector = makeFfnConnector(make(Role::kFfn, f));
            if (!connector.isOk()) {
                FfnLog failed;
                failed.error = connector.status().toString();
                return failed;
            }
            FfnLog log = runFfn(**connector, f, plan);
            (*connector)->close();
            return log;
        }));
    }
    std::vector<std::future<std::string>> attention;
    for (int a = 0; a < 2; ++a) {
        attention.push_back(runAsync([&, a] {
            auto connector = makeAttentionConnector(make(Role::kAttention, a));
            if (!connector.isOk()) return connector.status().toString();
            std::string problem = runAttention(**connector, a, plan);
            (*connector)->close();
            return problem;
        }));
    }
    for (int a = 0; a < 2; ++a) EXPECT_EQ(attention[a].get(), "") << "attention rank " << a;
    for (int f = 0; f < 2; ++f) {
        const FfnLog log = ffn[f].get();
        EXPECT_EQ(log.error, "") << "ffn rank " << f;
        EXPECT_TRUE(log.all_left) << "ffn rank " << f;
        EXPECT_EQ(log.steps.size(), plan.steps.size()) << "ffn rank " << f;
    }
}

}  // namespace
}  // namespace afd::transport
