// The nccl connector's host-side rules, none of which needs a GPU: its entry in the connector table, the communicator
// ranks of the deployment's ranks, the records the ranks exchange through the rendezvous (unique ids, GPU identities),
// the rule that no two ranks share a GPU, and where a frame sits in a receive slot.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "transport/afd_wire.h"
#include "transport/connector_factory.h"

#if AFD_HAVE_NCCL
#include "transport/nccl/nccl_device.h"
#include "transport/nccl/nccl_layout.h"
#include "transport/nccl/nccl_ranks.h"
#endif

namespace afd::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

#if AFD_HAVE_NCCL

AfdConfig config(const std::string& json, Role role) {
    auto afd = AfdConfig::fromJson(json, role, "test");
    AFD_CHECK_OK(afd.status());
    return *afd;
}

TEST(NcclBackendTest, TheTableListsADeviceConnectorAcrossHostsWithAGpuPerRank) {
    const std::optional<ConnectorCapabilities> nccl = connectorCapabilities(ConnectorKind::kNccl);
    ASSERT_TRUE(nccl.has_value());
    EXPECT_EQ(nccl->kind, ConnectorKind::kNccl);
    EXPECT_EQ(nccl->memory, ConnectorMemory::kDevice);
    EXPECT_TRUE(nccl->needsCudaDevice());
    EXPECT_TRUE(nccl->graph_capturable);
    EXPECT_TRUE(nccl->cross_host);
    EXPECT_FALSE(nccl->ranks_may_share_gpu);
    EXPECT_THAT(builtConnectorNames(), HasSubstr("nccl"));
    const std::vector<ConnectorCapabilities> built = builtConnectors();
    EXPECT_EQ(std::count_if(built.begin(), built.end(),
                            [](const ConnectorCapabilities& c) { return c.kind == ConnectorKind::kNccl; }),
              1);
}

TEST(NcclBackendTest, EveryRankNeedsACudaDevice) {
    for (const Role role : {Role::kAttention, Role::kFfn}) {
        const AfdConfig afd = config(R"({"connector":"nccl","num_ffn_ranks":2})", role);
        const core::Status cpu = checkConnectorUsable(afd, role, core::Device::cpu());
        EXPECT_EQ(cpu.code(), core::StatusCode::kInvalidArgument);
        EXPECT_THAT(cpu.message(), HasSubstr("afd.connector \"nccl\" moves device memory"));
        EXPECT_TRUE(checkConnectorUsable(afd, role, core::Device::cuda(1)).isOk());
    }
}

TEST(NcclRanksTest, FfnRanksComeFirstThenAttentionRanks) {
    // 2 attention ranks, 3 FFN ranks: FFN rank k is global k, attention rank a is global 3 + a.
    EXPECT_EQ(nccl::worldSize(2, 3), 5);
    EXPECT_EQ(nccl::globalRank(Role::kFfn, 0, 2, 3), 0);
    EXPECT_EQ(nccl::globalRank(Role::kFfn, 2, 2, 3), 2);
    EXPECT_EQ(nccl::globalRank(Role::kAttention, 0, 2, 3), 3);
    EXPECT_EQ(nccl::globalRank(Role::kAttention, 1, 2, 3), 4);
    // Every global rank is taken once.
    std::vector<int> seen;
    for (int k = 0; k < 3; ++k) seen.push_back(nccl::globalRank(Role::kFfn, k, 2, 3));
    for (int a = 0; a < 2; ++a) seen.push_back(nccl::globalRank(Role::kAttention, a, 2, 3));
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_THROW(nccl::globalRank(Role::kAttention, 2, 2, 3), core::Error);
    EXPECT_THROW(nccl::globalRank(Role::kFfn, -1, 2, 3), core::Error);
}

TEST(NcclRanksTest, UniqueIdsRoundTripAndOtherRecordsAreCorrupt) {
    const std::vector<std::string> ids = {std::string(nccl::kUniqueIdBytes, '\0'),
                                          std::string(nccl::kUniqueIdBytes, '\xff')};
    const std::string blob = nccl::encodeUniqueIds(ids);
    EXPECT_EQ(blob.size(), 8 + 2 * nccl::kUniqueIdBytes);
    const auto back = nccl::decodeUniqueIds(blob, 2, "ffn rank 0");
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(*back, ids);

    const auto wrong_count = nccl::decodeUniqueIds(blob, 1, "ffn rank 0");
    EXPECT_EQ(wrong_count.status().code(), core::StatusCode::kCorrupt);
    EXPECT_THAT(wrong_count.status().message(), AllOf(HasSubstr("ffn rank 0"), HasSubstr("holds 2 ids")));
    EXPECT_EQ(nccl::decodeUniqueIds(blob.substr(0, blob.size() - 1), 2, "x").status().code(),
              core::StatusCode::kCorrupt);
    EXPECT_EQ(nccl::decodeUniqueIds("AFDI", 2, "x").status().code(), core::StatusCode::kCorrupt);
    std::string bad_magic = blob;
    bad_magic[0] ^= 1;
    EXPECT_EQ(nccl::decodeUniqueIds(bad_magic, 2, "x").status().code(), core::StatusCode::kCorrupt);
    EXPECT_THROW(nccl::encodeUniqueIds(std::vector<std::string>{"short"}), core::Error);
}

TEST(NcclRanksTest, GpuIdentitiesRoundTripAndOtherRecordsAreCorrupt) {
    const nccl::GpuIdentity gpu{"0f1e2d3c-aaaa-bbbb-cccc-000011112222", std::string(32, 'a'), 3, "node-7"};
    const std::string blob = nccl::encodeGpuIdentity(gpu);
    const auto back = nccl::decodeGpuIdentity(blob, "attention rank 1");
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(*back, gpu);

    const auto corrupt = [](const std::string& text) {
        const auto got = nccl::decodeGpuIdentity(text, "attention rank 1");
        EXPECT_EQ(got.status().code(), core::StatusCode::kCorrupt) << text;
        EXPECT_THAT(got.status().message(), HasSubstr("attention rank 1")) << text;
    };
    const std::string uuid(32, 'a');
    corrupt("");
    corrupt("boot=b uuid=" + uuid + " device=0");                         // no host
    corrupt("boot=b uuid=" + uuid + " device=0 host=h boot=c");           // repeated
    corrupt("boot=b uuid=" + uuid.substr(1) + " device=0 host=h");        // short uuid
    corrupt("boot=b uuid=" + std::string(32, 'G') + " device=0 host=h");  // not hex
    corrupt("boot=b uuid=" + uuid + " device=-1 host=h");                 // not an index
    corrupt("boot=b uuid=" + uuid + " device=1x host=h");
    corrupt("boot=b uuid=" + uuid + " device=0 host=h color=red");  // unknown field
    corrupt("boot= uuid=" + uuid + " device=0 host=h");             // empty value
    corrupt("boot=b uuid=" + uuid + " device=0 host");              // no '='

    EXPECT_EQ(nccl::uuidHex(std::vector<unsigned char>{0x00, 0x1f, 0xa0, 0xff}), "001fa0ff");
    EXPECT_FALSE(nccl::hostBootId().empty());
}

TEST(NcclRanksTest, TwoRanksOnOneGpuAreRefusedNamingBothAndTheConnectorThatServesThem) {
    const std::string boot = "boot-1";
    const nccl::GpuIdentity gpu0{boot, std::string(31, '0') + "1", 0, "host-a"};
    const nccl::GpuIdentity gpu1{boot, std::string(31, '0') + "2", 1, "host-a"};
    // The same UUID on another boot is another machine's view (as a VM with the GPU passed through): distinct.
    const nccl::GpuIdentity elsewhere{"boot-2", gpu0.uuid, 0, "host-b"};
    std::vector<nccl::RankGpu> ranks = {{Role::kFfn, 0, gpu0}, {Role::kFfn, 1, gpu1}, {Role::kAttention, 0, elsewhere}};
    EXPECT_TRUE(nccl::checkNoSharedGpu(ranks).isOk());

    ranks.push_back({Role::kAttention, 1, gpu1});
    const core::Status shared = nccl::checkNoSharedGpu(ranks);
    EXPECT_EQ(shared.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(shared.message(), AllOf(HasSubstr("ffn rank 1 and attention rank 1"), HasSubstr(gpu1.uuid),
                                        HasSubstr("host-a"), HasSubstr("need a GPU each"), HasSubstr("cuda_ipc")));
}

TEST(NcclRanksTest, TheHostKeyIsNcclsOwnNcclHostidWhenSetElseTheBootId) {
    EXPECT_EQ(nccl::ncclHostKey(nullptr, "boot-1"), "boot-1");
    EXPECT_EQ(nccl::ncclHostKey("", "boot-1"), "boot-1");
    EXPECT_EQ(nccl::ncclHostKey("a b=", "boot-1"), "hostid-6120623d");  // hex: the record's fields stay one token
    // Two processes on one GPU with different NCCL_HOSTID values are two hosts to NCCL, and so to the check.
    const std::string uuid = std::string(31, '0') + "1";
    const nccl::GpuIdentity ffn{nccl::ncclHostKey("ffn0", "boot-1"), uuid, 0, "host-a"};
    const nccl::GpuIdentity attention{nccl::ncclHostKey("attention0", "boot-1"), uuid, 0, "host-a"};
    const std::vector<nccl::RankGpu> apart = {{Role::kFfn, 0, ffn}, {Role::kAttention, 0, attention}};
    EXPECT_TRUE(nccl::checkNoSharedGpu(apart).isOk());
    const std::vector<nccl::RankGpu> same = {{Role::kFfn, 0, ffn}, {Role::kAttention, 0, ffn}};
    EXPECT_EQ(nccl::checkNoSharedGpu(same).code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(nccl::decodeGpuIdentity(nccl::encodeGpuIdentity(ffn), "ffn rank 0").isOk());
}

TEST(NcclLayoutTest, SegmentsFollowTheHeaderAtAlignedOffsetsForTheMaximumRows) {
    // The m2n dispatch frame of a 64-wide model with top-4 routing: BF16 hidden, I32 ids, F32 weights.
    const auto layout = nccl::ncclSlotLayout(deviceM2nDispatchSpec(64, 4), 5);
    ASSERT_TRUE(layout.isOk()) << layout.status().toString();
    const nccl::NcclSlotLayout& l = *layout;
    ASSERT_EQ(l.count, 3);
    EXPECT_EQ(l.offsets[0], 256u);  // after the 16-byte header, aligned
    EXPECT_EQ(l.row_bytes[0], 128u);
    EXPECT_EQ(l.offsets[1], 1024u);  // 256 + 5 × 128 = 896, rounded up to 256
    EXPECT_EQ(l.row_bytes[1], 16u);
    EXPECT_EQ(l.offsets[2], 1280u);  // 1024 + 80, rounded up
    EXPECT_EQ(l.row_bytes[2], 16u);
    EXPECT_EQ(l.bytes, 1536u);
    EXPECT_EQ(l.segmentBytes(0, 3), 384u);
    EXPECT_EQ(l.segmentBytes(2, 0), 0u);
    for (int s = 0; s < l.count; ++s) EXPECT_EQ(l.offsets[s] % nccl::kNcclSlotAlignment, 0u);
    EXPECT_GE(l.offsets[0], sizeof(nccl::NcclFrameHeader));

    // Zero rows still leave room for the header.
    EXPECT_EQ(nccl::ncclSlotLayout(hiddenSpec(64), 0)->bytes, 256u);
    EXPECT_EQ(nccl::ncclSlotLayout(FrameSpec{}, 5).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(nccl::ncclSlotLayout(FrameSpec{{{core::DType::kF32, 0}}}, 5).status().code(),
              core::StatusCode::kInvalidArgument);
    FrameSpec five;
    for (int s = 0; s < 5; ++s) five.segments.push_back({core::DType::kF32, 1});
    EXPECT_EQ(nccl::ncclSlotLayout(five, 5).status().code(), core::StatusCode::kInvalidArgument);
}

#else

TEST(NcclBackendTest, WithoutNcclTheTableHasNoNcclEntry) {
    EXPECT_FALSE(connectorCapabilities(ConnectorKind::kNccl).has_value());
}

#endif

}  // namespace
}  // namespace afd::transport
