#include "transport/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "core/check.h"

namespace afd::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Topology makeTopology(int a, int f, AfdMode mode) {
    auto topology = Topology::create(a, f, mode);
    EXPECT_TRUE(topology.isOk()) << topology.status().toString();
    return std::move(topology).value();
}

// p2p blocks written out by hand from the rule FFN k ← [ceil(k·A/F), ceil((k+1)·A/F)), for every A in 1..4 and
// F in 1..3 with A >= F.
const std::map<std::pair<int, int>, std::vector<std::vector<int>>>& p2pBlocks() {
    static const std::map<std::pair<int, int>, std::vector<std::vector<int>>> kBlocks = {
        {{1, 1}, {{0}}},          {{2, 1}, {{0, 1}}},         {{2, 2}, {{0}, {1}}},
        {{3, 1}, {{0, 1, 2}}},    {{3, 2}, {{0, 1}, {2}}},    {{3, 3}, {{0}, {1}, {2}}},
        {{4, 1}, {{0, 1, 2, 3}}}, {{4, 2}, {{0, 1}, {2, 3}}}, {{4, 3}, {{0, 1}, {2}, {3}}},
    };
    return kBlocks;
}

TEST(Topology, P2pBlocksFrom1A1FTo4A3F) {
    for (const auto& [counts, blocks] : p2pBlocks()) {
        const auto [a, f] = counts;
        SCOPED_TRACE(testing::Message() << a << "A" << f << "F");
        Topology topology = makeTopology(a, f, AfdMode::kP2p);
        ASSERT_EQ(static_cast<int>(blocks.size()), f);
        for (int k = 0; k < f; ++k) {
            EXPECT_EQ(topology.attentionPeersOfFfn(k), blocks[k]) << "FFN " << k;
            for (int att : blocks[k]) EXPECT_THAT(topology.ffnPeersOfAttention(att), ElementsAre(k)) << "A" << att;
        }
    }
}

TEST(Topology, TheMostPeersOfEachRoleAreTheLargestPeerListOfItsRanks) {
    for (const AfdMode mode : {AfdMode::kM2n, AfdMode::kP2p}) {
        for (int a = 1; a <= 9; ++a) {
            for (int f = 1; f <= 9; ++f) {
                if (mode == AfdMode::kP2p && a < f) continue;
                SCOPED_TRACE(testing::Message() << a << "A" << f << "F " << modeName(mode));
                const Topology topology = makeTopology(a, f, mode);
                size_t of_ffn = 0, of_attention = 0;
                for (int k = 0; k < f; ++k) of_ffn = std::max(of_ffn, topology.attentionPeersOfFfn(k).size());
                for (int r = 0; r < a; ++r)
                    of_attention = std::max(of_attention, topology.ffnPeersOfAttention(r).size());
                EXPECT_EQ(topology.mostAttentionPeersOfFfn(), static_cast<int>(of_ffn));
                EXPECT_EQ(topology.mostFfnPeersOfAttention(), static_cast<int>(of_attention));
            }
        }
    }
}

TEST(Topology, P2pThreeAttentionTwoFfnMatchesTheDocumentedExample) {
    Topology topology = makeTopology(3, 2, AfdMode::kP2p);
    EXPECT_THAT(topology.attentionPeersOfFfn(0), ElementsAre(0, 1));
    EXPECT_THAT(topology.attentionPeersOfFfn(1), ElementsAre(2));
    EXPECT_THAT(topology.ffnPeersOfAttention(0), ElementsAre(0));
    EXPECT_THAT(topology.ffnPeersOfAttention(1), ElementsAre(0));
    EXPECT_THAT(topology.ffnPeersOfAttention(2), ElementsAre(1));
}

TEST(Topology, P2pLargeUnevenBlocksPartitionTheAttentionRanks) {
    // 7A3F: blocks of sizes 3, 2, 2 ([0,3), [3,5), [5,7)).
    Topology topology = makeTopology(7, 3, AfdMode::kP2p);
    EXPECT_THAT(topology.attentionPeersOfFfn(0), ElementsAre(0, 1, 2));
    EXPECT_THAT(topology.attentionPeersOfFfn(1), ElementsAre(3, 4));
    EXPECT_THAT(topology.attentionPeersOfFfn(2), ElementsAre(5, 6));
    for (int a = 0; a < 7; ++a) {
        const int expected = a < 3 ? 0 : (a < 5 ? 1 : 2);
        EXPECT_THAT(topology.ffnPeersOfAttention(a), ElementsAre(expected)) << "A" << a;
    }
}

TEST(Topology, P2pRejectsFewerAttentionThanFfnRanks) {
    for (auto [a, f] : std::vector<std::pair<int, int>>{{1, 2}, {1, 3}, {2, 3}}) {
        auto topology = Topology::create(a, f, AfdMode::kP2p);
        ASSERT_FALSE(topology.isOk()) << a << "A" << f << "F";
        EXPECT_EQ(topology.status().code(), core::StatusCode::kInvalidArgument);
        EXPECT_THAT(topology.status().message(), HasSubstr("num_attention_ranks >= num_ffn_ranks"));
        EXPECT_THAT(topology.status().message(), HasSubstr(fmt::format("got {} < {}", a, f)));
    }
}

TEST(Topology, M2nConnectsEveryoneWithEveryone) {
    for (int a = 1; a <= 4; ++a) {
        for (int f = 1; f <= 3; ++f) {
            SCOPED_TRACE(testing::Message() << a << "A" << f << "F");
            Topology topology = makeTopology(a, f, AfdMode::kM2n);
            std::vector<int> all_ffn;
            for (int k = 0; k < f; ++k) all_ffn.push_back(k);
            std::vector<int> all_attention;
            for (int i = 0; i < a; ++i) all_attention.push_back(i);
            for (int i = 0; i < a; ++i) EXPECT_EQ(topology.ffnPeersOfAttention(i), all_ffn);
            for (int k = 0; k < f; ++k) EXPECT_EQ(topology.attentionPeersOfFfn(k), all_attention);
        }
    }
}

TEST(Topology, RejectsNonPositiveAndHugeCounts) {
    for (AfdMode mode : {AfdMode::kM2n, AfdMode::kP2p}) {
        auto no_attention = Topology::create(0, 1, mode);
        ASSERT_FALSE(no_attention.isOk());
        EXPECT_THAT(no_attention.status().message(), HasSubstr("num_attention_ranks"));
        auto no_ffn = Topology::create(1, 0, mode);
        ASSERT_FALSE(no_ffn.isOk());
        EXPECT_THAT(no_ffn.status().message(), HasSubstr("num_ffn_ranks"));
        auto negative = Topology::create(-3, 1, mode);
        EXPECT_FALSE(negative.isOk());
        auto huge = Topology::create(Topology::kMaxRanks + 1, 1, mode);
        EXPECT_FALSE(huge.isOk());
    }
}

TEST(Topology, OutOfRangeRankIsABug) {
    Topology topology = makeTopology(2, 1, AfdMode::kP2p);
    EXPECT_THROW((void)topology.ffnPeersOfAttention(2), core::Error);
    EXPECT_THROW((void)topology.ffnPeersOfAttention(-1), core::Error);
    EXPECT_THROW((void)topology.attentionPeersOfFfn(1), core::Error);
}

// Checks that the ranges are contiguous from 0, cover [0, E) exactly once, and agree with ownerOf.
void expectExactCover(const ExpertPartition& partition) {
    std::vector<int> owners(partition.numExperts(), 0);
    int next = 0;
    for (int k = 0; k < partition.numFfnRanks(); ++k) {
        ExpertRange range = partition.rangeOf(k);
        EXPECT_EQ(range.begin, next) << "FFN " << k;
        EXPECT_GT(range.size(), 0) << "FFN " << k;
        for (int e = range.begin; e < range.end; ++e) {
            ++owners[e];
            EXPECT_EQ(partition.ownerOf(e), k) << "expert " << e;
        }
        next = range.end;
    }
    EXPECT_EQ(next, partition.numExperts());
    for (int e = 0; e < partition.numExperts(); ++e) EXPECT_EQ(owners[e], 1) << "expert " << e;
}

TEST(ExpertPartition, OneHundredTwentyEightExpertsOverOneToSevenRanks) {
    // Sizes written out by hand: the first 128 % F ranks hold one more.
    const std::map<int, std::vector<int>> kSizes = {
        {1, {128}},
        {2, {64, 64}},
        {3, {43, 43, 42}},
        {4, {32, 32, 32, 32}},
        {5, {26, 26, 26, 25, 25}},
        {6, {22, 22, 21, 21, 21, 21}},
        {7, {19, 19, 18, 18, 18, 18, 18}},
    };
    for (const auto& [f, sizes] : kSizes) {
        SCOPED_TRACE(testing::Message() << "F=" << f);
        auto partition = ExpertPartition::create(128, f);
        ASSERT_TRUE(partition.isOk()) << partition.status().toString();
        std::vector<int> got;
        for (int k = 0; k < f; ++k) got.push_back(partition->rangeOf(k).size());
        EXPECT_EQ(got, sizes);
        expectExactCover(*partition);
    }
}

TEST(ExpertPartition, EightExpertsOverThreeRanks) {
    auto partition = ExpertPartition::create(8, 3);
    ASSERT_TRUE(partition.isOk());
    EXPECT_EQ(partition->rangeOf(0), (ExpertRange{0, 3}));
    EXPECT_EQ(partition->rangeOf(1), (ExpertRange{3, 6}));
    EXPECT_EQ(partition->rangeOf(2), (ExpertRange{6, 8}));
    EXPECT_EQ(partition->ownerOf(2), 0);
    EXPECT_EQ(partition->ownerOf(3), 1);
    EXPECT_EQ(partition->ownerOf(5), 1);
    EXPECT_EQ(partition->ownerOf(6), 2);
    EXPECT_EQ(partition->ownerOf(7), 2);
    expectExactCover(*partition);
}

TEST(ExpertPartition, EqualCountsGiveOneExpertPerRank) {
    auto partition = ExpertPartition::create(5, 5);
    ASSERT_TRUE(partition.isOk());
    for (int k = 0; k < 5; ++k) EXPECT_EQ(partition->rangeOf(k), (ExpertRange{k, k + 1}));
    expectExactCover(*partition);
}

TEST(ExpertPartition, MoreFfnRanksThanExpertsIsAnErrorNamingBoth) {
    auto partition = ExpertPartition::create(8, 9);
    ASSERT_FALSE(partition.isOk());
    EXPECT_EQ(partition.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(partition.status().message(), HasSubstr("num_ffn_ranks (9)"));
    EXPECT_THAT(partition.status().message(), HasSubstr("num_experts (8)"));
}

TEST(ExpertPartition, RejectsNonPositiveCounts) {
    EXPECT_FALSE(ExpertPartition::create(0, 1).isOk());
    EXPECT_FALSE(ExpertPartition::create(8, 0).isOk());
}

TEST(ExpertPartition, ComesFromTheTopology) {
    Topology topology = makeTopology(2, 3, AfdMode::kM2n);
    auto partition = topology.expertPartition(128);
    ASSERT_TRUE(partition.isOk());
    EXPECT_EQ(partition->numFfnRanks(), 3);
    EXPECT_EQ(partition->rangeOf(2), (ExpertRange{86, 128}));
    EXPECT_FALSE(topology.expertPartition(2).isOk());
}

TEST(ExpertPartition, OutOfRangeQueriesAreBugs) {
    auto partition = ExpertPartition::create(8, 3);
    ASSERT_TRUE(partition.isOk());
    EXPECT_THROW((void)partition->rangeOf(3), core::Error);
    EXPECT_THROW((void)partition->ownerOf(8), core::Error);
    EXPECT_THROW((void)partition->ownerOf(-1), core::Error);
}

}  // namespace
}  // namespace afd::transport
