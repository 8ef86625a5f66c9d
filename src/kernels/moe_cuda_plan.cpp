// The CUDA MoE layer's planner (moe_cuda_plan.h): which tile and which path of each stage, from the layer's shape and
// the routing entries this rank serves.
#include "kernels/moe_cuda_plan.h"

#include <cstring>

#include "core/check.h"

namespace afd::kernels {
namespace {

// Up to this many routing entries kAuto takes tiny8: each CTA streams about one weight tile per kernel, so the down
// kernel's weights can stream beside the gate-up kernel's.
constexpr int64_t kTinyEntries = 16;
// Mean routing entries per expert for which kAuto takes tall128g, [min, max): its gate-up kernel starts without the
// gather, 1-2 % faster than tall128 there (T = 160-383 for Qwen3-30B-A3B), slower at 8 and from 24.
constexpr int64_t kTallGatherMinMean = 10;
constexpr int64_t kTallGatherMaxMean = 24;

void checkShape(const MoeParams& p) {
    AFD_CHECK(p.num_tokens >= 0, "MoE CUDA: num_tokens {} < 0", p.num_tokens);
    AFD_CHECK(p.hidden > 0 && p.hidden % 64 == 0, "MoE CUDA: hidden {} must be a positive multiple of 64", p.hidden);
    AFD_CHECK(p.inter > 0 && p.inter % 32 == 0, "MoE CUDA: inter {} must be a positive multiple of 32", p.inter);
    AFD_CHECK(p.top_k >= 1, "MoE CUDA: top_k {} < 1", p.top_k);
    AFD_CHECK(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts, "MoE CUDA: num_experts {} outside [1, {}]",
              p.num_experts, kMoeMaxExperts);
}

// kAuto's choice. Mean routing entries per expert decides between the memory-bound shapes (one consumer, two or more
// CTAs per SM, the token tile just above the typical count so each expert's weights stream once) and the wide ones.
MoeTileConfig chooseTile(const MoeParams& p) {
    const int64_t entries = moeServedEntries(p);
    const int64_t mean = entries / p.num_experts;
    if (p.shared_sms) {
        // No token-TMA tile (MoeParams::shared_sms): tall128g from half an entry per expert, else the small tiles.
        if (entries > kTinyEntries && 2 * entries >= p.num_experts &&
            moeTileFits(MoeTileConfig::kTall128Gather, p.hidden, p.inter)) {
            return MoeTileConfig::kTall128Gather;
        }
        MoeTileConfig tile = entries <= kTinyEntries ? MoeTileConfig::kTiny8 : MoeTileConfig::kSmall16;
        if (mean > 16) {
            tile = MoeTileConfig::kSmall128;
        } else if (mean > 4) {
            tile = MoeTileConfig::kSmall64;
        }
        return moeTileFits(tile, p.hidden, p.inter) ? tile : MoeTileConfig::kSmall128;
    }
    // tall128 (256 weight rows x 128 tokens, each token tile read by half as many items as with wide128), with its
    // item ring, down kernel per expert and combine by part, is the fastest from half a routing entry per expert (T = 8
    // for Qwen3-30B-A3B) at every T with zipf routing and up to T = 1536 with uniform routing; with uniform routing at
    // T = 2048-4096 wide288, whose tile holds a whole expert, is 1.5-12 % faster. The host cannot see the skew before
    // the launch; the choice favours skewed routing, the shape real routers produce. Below half an entry per expert
    // (a quarter to three eighths) small16 is as fast or faster.
    if (entries > kTinyEntries && 2 * entries >= p.num_experts &&
        moeTileFits(MoeTileConfig::kTall128, p.hidden, p.inter)) {
        return mean >= kTallGatherMinMean && mean < kTallGatherMaxMean ? MoeTileConfig::kTall128Gather
                                                                       : MoeTileConfig::kTall128;
    }
    // Where the 256-row tile does not divide the layer: wide288 up to 288 entries per expert (uniform routing at 256
    // +- 16: most experts read their weights once, 8 % faster than wide256; zipf 5 % slower), wide128 from 17 (as fast
    // as small64 with uniform routing, 7-14 % faster with zipf) to 112 (above, a 128-token tile leaves about half the
    // experts a second, nearly empty tile).
    MoeTileConfig tile = entries <= kTinyEntries ? MoeTileConfig::kTiny8 : MoeTileConfig::kSmall16;
    if (mean > 288) {
        tile = MoeTileConfig::kWide256;
    } else if (mean > 112) {
        tile = MoeTileConfig::kWide288;
    } else if (mean > 16) {
        tile = MoeTileConfig::kWide128;
    } else if (mean > 4) {
        tile = MoeTileConfig::kSmall64;
    }
    return moeTileFits(tile, p.hidden, p.inter) ? tile : MoeTileConfig::kSmall128;
}

}  // namespace

void throwNoMoeTile(MoeTileConfig config) {
    AFD_FAIL("MoE tile config {} has no row in kMoeTiles (kAuto names no tile)", static_cast<int>(config));
}

bool parseMoeTileConfig(const char* text, MoeTileConfig* config) {
    if (std::strcmp(text, "auto") == 0) {
        *config = MoeTileConfig::kAuto;
        return true;
    }
    for (const MoeTile& t : kMoeTiles) {
        if (std::strcmp(text, t.name) == 0) {
            *config = t.config;
            return true;
        }
    }
    return false;
}

const char* moeTileConfigName(MoeTileConfig config) {
    return config == MoeTileConfig::kAuto ? "auto" : moeTile(config).name;
}

bool moeTileFits(MoeTileConfig config, int64_t hidden, int64_t inter) {
    const MoeTileShape s = moeTileShape(config);
    return inter % gateUpColumnsPerItem(s) == 0 && hidden % downRowsPerItem(s) == 0;
}

int64_t moeServedEntries(const MoeParams& p) {
    AFD_CHECK(p.routed_experts == 0 || p.routed_experts >= p.num_experts,
              "MoE routed_experts {} is below num_experts {} (0 means num_experts)", p.routed_experts, p.num_experts);
    const int64_t entries = p.num_tokens * p.top_k;
    return p.routed_experts > p.num_experts ? entries * p.num_experts / p.routed_experts : entries;
}

MoeCudaPlan planMoeCuda(const MoeParams& params, MoeTileConfig tile) {
    checkShape(params);
    MoeCudaPlan plan;
    if (tile == MoeTileConfig::kAuto) {
        plan.tile = chooseTile(params);
    } else {
        const MoeTileShape s = moeTileShape(tile);
        AFD_CHECK(moeTileFits(tile, params.hidden, params.inter),
                  "MoE tile config {} needs inter % {} == 0 and hidden % {} == 0 (inter {}, hidden {})",
                  moeTileConfigName(tile), gateUpColumnsPerItem(s), downRowsPerItem(s), params.inter, params.hidden);
        plan.tile = tile;
    }
    const MoeTileShape shape = moeTileShape(plan.tile);
    const int64_t entries = params.num_tokens * params.top_k;
    const int64_t served = moeServedEntries(params);
    const int64_t experts = params.num_experts;
    plan.fused_routing = !shape.tma_tokens && entries <= kMoeFusedRoutingEntries;
    // The down kernel's fused combine stores bf16 only; FP32 sums (MoeParams::out_f32) take the combine kernel.
    plan.fused_combine = entries <= kMoeFusedCombineEntries && !params.out_f32;
    // tall128g's cp.async producer takes the token-TMA tiles' item ring, down kernel per expert and combine by part,
    // after the permute kernel only: the permute kernel zeroes their words (the fused routing has none).
    const bool ring_paths = shape.tma_tokens || (isTall128Gather(shape) && !plan.fused_routing);
    plan.dynamic_schedule = ring_paths;
    // wide128's gate-up kernel keeps to 128 registers so that its CTAs are resident beside the gather kernel's
    // (Layout::kStreamsBesideGather); the other token-TMA kernels cannot share an SM with them and gather themselves.
    plan.gather_kernel = plan.tile == MoeTileConfig::kWide128;
    plan.gather_in_gate_up = shape.tma_tokens && !plan.gather_kernel;
    plan.down_per_expert = served <= kDownPerExpertEntries * experts && ring_paths && !plan.fused_combine;
    // One part per weight tile of the down kernel (a block of hidden rows), whose columns the combine's CTAs split
    // into 8-column pieces of whole tokens (launchMoeCombine's rule).
    const int64_t parts = params.hidden / downRowsPerItem(shape);
    const int64_t part_cols = parts > 0 ? params.hidden / parts : 0;
    const bool by_part = plan.down_per_expert && served <= kCombineByPartEntries * experts && parts >= 1 &&
                         parts <= kMoeMaxCombineParts && part_cols >= 8 && part_cols % 8 == 0 &&
                         256 % (part_cols / 8) == 0;
    plan.combine_parts = by_part ? static_cast<int>(parts) : 0;
    plan.gate_up_on_permute_words = plan.gather_in_gate_up && moePermuteChunks(entries) > 0;
    plan.weights_read_once = served <= experts * shape.block_tokens;
    plan.weights_shared_per_item = shape.block_tokens > 128 || shape.m_blocks > 1;
    plan.release_early = served <= kReleaseEarlyEntries * experts;
    plan.down_prefetch = entries > kNoDownPrefetchEntries;
    return plan;
}

MoeCudaPlan withStagesReplayableAlone(MoeCudaPlan plan) {
    plan.down_per_expert = false;
    plan.combine_parts = 0;  // the combine by part counts the down items of the down kernel per expert
    return plan;
}

}  // namespace afd::kernels
