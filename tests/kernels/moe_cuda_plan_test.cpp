// The CUDA MoE layer's planner and tile table (kernels/moe_cuda_plan.h), on the host: which tile and which path of
// each stage a batch takes at the Qwen3-30B-A3B shapes and elsewhere, and the table's names. No GPU needed.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "core/check.h"
#include "kernels/moe_cuda_plan.h"

namespace afd::kernels {
namespace {

// The Qwen3-30B-A3B layer's shape (E = 128, top-8, H = 2048, I = 768); set num_tokens. No pointers: the planner reads
// only the shape.
MoeParams qwen3Layer(int64_t tokens = 0) {
    MoeParams p;
    p.num_tokens = tokens;
    p.hidden = 2048;
    p.inter = 768;
    p.num_experts = 128;
    p.top_k = 8;
    p.act_dtype = ActDType::kBf16;
    return p;
}

TEST(MoeCudaPlanTest, TableListsEveryTileOnceByName) {
    std::set<std::string> names;
    for (const MoeTile& t : kMoeTiles) {
        EXPECT_TRUE(names.insert(t.name).second) << t.name;
        EXPECT_EQ(&moeTile(t.config), &t);
        MoeTileConfig parsed = MoeTileConfig::kAuto;
        ASSERT_TRUE(parseMoeTileConfig(t.name, &parsed)) << t.name;
        EXPECT_EQ(parsed, t.config);
        EXPECT_STREQ(moeTileConfigName(t.config), t.name);
        EXPECT_GT(t.shape.block_tokens, 0) << t.name;
        EXPECT_GT(t.shape.stages, 0) << t.name;
    }
    EXPECT_EQ(names.size(), kMoeTileCount);
    MoeTileConfig parsed = MoeTileConfig::kTiny8;
    ASSERT_TRUE(parseMoeTileConfig("auto", &parsed));
    EXPECT_EQ(parsed, MoeTileConfig::kAuto);
    EXPECT_STREQ(moeTileConfigName(MoeTileConfig::kAuto), "auto");
    for (const char* gone : {"huge", "small32", "wide256g", "wide128pair", "wide256pair", ""}) {
        EXPECT_FALSE(parseMoeTileConfig(gone, &parsed)) << gone;
    }
    EXPECT_THROW(moeTile(MoeTileConfig::kAuto), core::Error);
}

TEST(MoeCudaPlanTest, AutoTileFollowsEntriesPerExpert) {
    const std::pair<int64_t, MoeTileConfig> expected[] = {
        {1, MoeTileConfig::kTiny8},           {2, MoeTileConfig::kTiny8},           {3, MoeTileConfig::kSmall16},
        {7, MoeTileConfig::kSmall16},         {8, MoeTileConfig::kTall128},         {159, MoeTileConfig::kTall128},
        {160, MoeTileConfig::kTall128Gather}, {383, MoeTileConfig::kTall128Gather}, {384, MoeTileConfig::kTall128},
        {1024, MoeTileConfig::kTall128},      {4096, MoeTileConfig::kTall128},      {16384, MoeTileConfig::kTall128},
    };
    for (const auto& [tokens, tile] : expected) {
        EXPECT_EQ(planMoeCuda(qwen3Layer(tokens)).tile, tile) << "T " << tokens;
    }
    // Where the 256-row tile does not divide the layer (inter % 128 != 0), the wide shapes by entries per expert.
    MoeParams p = qwen3Layer();
    p.inter = 192;
    const std::pair<int64_t, MoeTileConfig> without_tall[] = {
        {8, MoeTileConfig::kSmall16},    {64, MoeTileConfig::kSmall16},   {80, MoeTileConfig::kSmall64},
        {272, MoeTileConfig::kWide128},  {1024, MoeTileConfig::kWide128}, {1792, MoeTileConfig::kWide128},
        {1808, MoeTileConfig::kWide288}, {4608, MoeTileConfig::kWide288}, {4624, MoeTileConfig::kWide256},
    };
    for (const auto& [tokens, tile] : without_tall) {
        p.num_tokens = tokens;
        EXPECT_EQ(planMoeCuda(p).tile, tile) << "T " << tokens << " inter 192";
    }
    // A layer no wide tile divides: small128, whose 64-row items divide every layer the kernels take.
    p.inter = 96;
    p.num_tokens = 4096;
    EXPECT_EQ(planMoeCuda(p).tile, MoeTileConfig::kSmall128);
}

TEST(MoeCudaPlanTest, ChosenTileMustFitTheLayer) {
    MoeParams p = qwen3Layer(64);
    p.inter = 96;
    EXPECT_FALSE(moeTileFits(MoeTileConfig::kWide256, p.hidden, p.inter));
    EXPECT_THROW(planMoeCuda(p, MoeTileConfig::kWide256), core::Error);
    EXPECT_THROW(planMoeCuda(p, MoeTileConfig::kTall128Gather), core::Error);
    EXPECT_EQ(planMoeCuda(p, MoeTileConfig::kSmall64).tile, MoeTileConfig::kSmall64);
    p = qwen3Layer(64);
    for (const MoeTile& t : kMoeTiles) {
        EXPECT_EQ(planMoeCuda(p, t.config).tile, t.config) << t.name;  // every tile divides the Qwen3 layer
    }
}

TEST(MoeCudaPlanTest, RejectsShapesTheKernelsDoNotTake) {
    MoeParams p = qwen3Layer(4);
    p.hidden = 96;
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p = qwen3Layer(4);
    p.inter = 48;
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p = qwen3Layer(4);
    p.num_experts = kMoeMaxExperts + 1;
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p.num_experts = 0;
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p = qwen3Layer(4);
    p.top_k = 0;
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p = qwen3Layer(-1);
    EXPECT_THROW(planMoeCuda(p), core::Error);
    p = qwen3Layer(4);
    p.routed_experts = 64;  // fewer routed experts than this rank holds
    EXPECT_THROW(planMoeCuda(p), core::Error);
    EXPECT_THROW(moeServedEntries(p), core::Error);
}

// An FFN rank serving half of the 128 routed experts (MoeParams::routed_experts) sees every routing entry but serves
// about half of them: its choices by entries per expert follow the served half, so they match one rank's at the same
// T. tiny8's rule counts entries (the experts a batch touches), so the half rank keeps it up to T = 4 (16 served
// entries, as one rank's T = 2).
TEST(MoeCudaPlanTest, ChoicesFollowTheEntriesThisRankServes) {
    MoeParams one_rank = qwen3Layer();
    MoeParams half = qwen3Layer();
    half.num_experts = 64;
    half.routed_experts = 128;
    for (const int64_t tokens : {1, 2, 6, 7, 8, 64, 159, 160, 383, 384, 1024, 2048, 4096}) {
        one_rank.num_tokens = tokens;
        half.num_tokens = tokens;
        const MoeCudaPlan one = planMoeCuda(one_rank);
        const MoeCudaPlan served = planMoeCuda(half);
        EXPECT_EQ(served.tile, one.tile) << "T " << tokens;
        EXPECT_EQ(served.down_per_expert, one.down_per_expert) << "T " << tokens;
        EXPECT_EQ(served.combine_parts, one.combine_parts) << "T " << tokens;
        EXPECT_EQ(served.release_early, one.release_early) << "T " << tokens;
        EXPECT_EQ(served.weights_read_once, one.weights_read_once) << "T " << tokens;
    }
    half.num_tokens = 4;
    EXPECT_EQ(moeServedEntries(half), 16);
    EXPECT_EQ(planMoeCuda(half).tile, MoeTileConfig::kTiny8);
    half.num_tokens = 6;  // 48 entries, about 24 served: small16, where all 48 counted against 64 experts took tall128
    EXPECT_EQ(planMoeCuda(half).tile, MoeTileConfig::kSmall16);
    half.routed_experts = 0;  // one rank serves all of them
    EXPECT_EQ(moeServedEntries(half), 48);
    EXPECT_EQ(planMoeCuda(half).tile, MoeTileConfig::kTall128);
}

// The paths moeForwardCuda takes at the Qwen3-30B-A3B shapes: each applies only where its rule allows it.
TEST(MoeCudaPlanTest, PlanFollowsItsRulesAtTheQwen3Shapes) {
    MoeCudaPlan plan = planMoeCuda(qwen3Layer(1));  // 8 entries: the GEMM kernels route, the down kernel combines
    EXPECT_EQ(plan.tile, MoeTileConfig::kTiny8);
    EXPECT_TRUE(plan.fused_routing);
    EXPECT_TRUE(plan.fused_combine);
    EXPECT_FALSE(plan.dynamic_schedule);
    EXPECT_FALSE(plan.gather_kernel);
    EXPECT_FALSE(plan.gather_in_gate_up);
    EXPECT_FALSE(plan.down_per_expert);
    EXPECT_EQ(plan.combine_parts, 0);
    EXPECT_FALSE(plan.down_prefetch);  // its copies would share DRAM with the gate-up kernel's
    EXPECT_TRUE(plan.weights_read_once);
    EXPECT_FALSE(plan.weights_shared_per_item);
    EXPECT_TRUE(plan.release_early);

    plan = planMoeCuda(qwen3Layer(2));  // 16 entries: the down kernel prefetches, no fused combine
    EXPECT_EQ(plan.tile, MoeTileConfig::kTiny8);
    EXPECT_TRUE(plan.down_prefetch);
    EXPECT_FALSE(plan.fused_combine);

    plan = planMoeCuda(qwen3Layer(1024));  // 64 entries per expert: tall128 with every token-TMA path
    EXPECT_EQ(plan.tile, MoeTileConfig::kTall128);
    EXPECT_FALSE(plan.fused_routing);
    EXPECT_FALSE(plan.fused_combine);
    EXPECT_TRUE(plan.dynamic_schedule);
    EXPECT_FALSE(plan.gather_kernel);
    EXPECT_TRUE(plan.gather_in_gate_up);
    EXPECT_TRUE(plan.down_per_expert);
    EXPECT_EQ(plan.combine_parts, 8);  // 2048 hidden rows / 256 per down item
    EXPECT_TRUE(plan.gate_up_on_permute_words);
    EXPECT_TRUE(plan.weights_read_once);
    EXPECT_TRUE(plan.weights_shared_per_item);
    EXPECT_TRUE(plan.release_early);

    plan = planMoeCuda(qwen3Layer(512), MoeTileConfig::kWide128);  // the gather kernel beside its gate-up kernel
    EXPECT_TRUE(plan.gather_kernel);
    EXPECT_FALSE(plan.gather_in_gate_up);
    EXPECT_FALSE(plan.gate_up_on_permute_words);
    EXPECT_EQ(plan.combine_parts, 16);  // 128 hidden rows per down item
    EXPECT_FALSE(plan.weights_shared_per_item);

    plan = planMoeCuda(qwen3Layer(2048));  // 128 entries per expert: down per expert, the combine after the down grid
    EXPECT_TRUE(plan.down_per_expert);
    EXPECT_EQ(plan.combine_parts, 0);
    EXPECT_FALSE(plan.release_early);
    EXPECT_TRUE(plan.weights_read_once);

    plan = planMoeCuda(qwen3Layer(4096));  // compute-bound: the down kernel waits for the gate-up grid
    EXPECT_FALSE(plan.down_per_expert);
    EXPECT_EQ(plan.combine_parts, 0);
    EXPECT_TRUE(plan.gate_up_on_permute_words);
    EXPECT_FALSE(plan.weights_read_once);

    plan = planMoeCuda(qwen3Layer(256));  // 16 entries per expert, one permute CTA: tall128g
    EXPECT_EQ(plan.tile, MoeTileConfig::kTall128Gather);
    EXPECT_FALSE(plan.gate_up_on_permute_words);

    // tall128g (kAuto's choice at T = 256; asked for at 1024): no gather, but the item ring, the down kernel per expert
    // and the combine by part of the token-TMA shapes, which need the permute kernel's words (none under the fused
    // routing).
    for (const auto& [tokens, tile] :
         {std::pair{int64_t{1024}, MoeTileConfig::kTall128Gather}, std::pair{int64_t{256}, MoeTileConfig::kAuto}}) {
        plan = planMoeCuda(qwen3Layer(tokens), tile);
        EXPECT_EQ(plan.tile, MoeTileConfig::kTall128Gather) << "T " << tokens;
        EXPECT_FALSE(plan.fused_routing) << "T " << tokens;
        EXPECT_FALSE(plan.gather_kernel) << "T " << tokens;
        EXPECT_FALSE(plan.gather_in_gate_up) << "T " << tokens;
        EXPECT_FALSE(plan.gate_up_on_permute_words) << "T " << tokens;
        EXPECT_TRUE(plan.dynamic_schedule) << "T " << tokens;
        EXPECT_TRUE(plan.down_per_expert) << "T " << tokens;
        EXPECT_EQ(plan.combine_parts, 8) << "T " << tokens;
    }
    plan = planMoeCuda(qwen3Layer(24), MoeTileConfig::kTall128Gather);  // 192 entries: the fused routing
    EXPECT_TRUE(plan.fused_routing);
    EXPECT_FALSE(plan.dynamic_schedule);
    EXPECT_FALSE(plan.down_per_expert);
    EXPECT_EQ(plan.combine_parts, 0);
}

TEST(MoeCudaPlanTest, StagesReplayableAloneWaitForWholeGrids) {
    const MoeCudaPlan plan = planMoeCuda(qwen3Layer(1024));
    ASSERT_TRUE(plan.down_per_expert);
    ASSERT_GT(plan.combine_parts, 0);
    const MoeCudaPlan alone = withStagesReplayableAlone(plan);
    EXPECT_FALSE(alone.down_per_expert);
    EXPECT_EQ(alone.combine_parts, 0);
    EXPECT_EQ(alone.tile, plan.tile);
    EXPECT_EQ(alone.dynamic_schedule, plan.dynamic_schedule);
    EXPECT_EQ(alone.gather_in_gate_up, plan.gather_in_gate_up);
    EXPECT_EQ(alone.gate_up_on_permute_words, plan.gate_up_on_permute_words);
}

TEST(MoeCudaPlanTest, PermuteChunksBeyondOneCta) {
    EXPECT_EQ(moePermuteChunks(0), 0);
    EXPECT_EQ(moePermuteChunks(kMoeSingleCtaPermuteEntries), 0);
    EXPECT_EQ(moePermuteChunks(kMoeSingleCtaPermuteEntries + 1), 3);
    EXPECT_EQ(moePermuteChunks(8192), 8);
    EXPECT_EQ(moePermuteChunks(8193), 9);
}

}  // namespace
}  // namespace afd::kernels
