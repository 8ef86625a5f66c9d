// Op-by-op harness of the CUDA MoE layer against fp32 CPU references: every stage (permute, gate-up + SwiGLU,
// down, combine) and the whole layer, on fresh random inputs of many shapes (T = 0 and 1, experts with no tokens,
// all tokens on one expert, unserved entries, no entry served, skewed routing with several token tiles per expert,
// the Qwen3-30B-A3B layer), for every tile configuration of kMoeTiles that divides the case's layer, each with the plan
// the planner makes for it and with its stages replayable alone (the down kernel after the whole gate-up grid, the
// combine after the whole down grid), with outputs and workspace poisoned (NaN) before each run. BF16 paths must reach
// a relative L2 error under 1e-2. Also: replay of a captured CUDA graph after the routing changed, MLP widths that are
// not a multiple of 32 packed at their packed width, and the error paths. The planner's rules themselves are tested on
// the host (tests/kernels/moe_cuda_plan_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/moe_cuda.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;
using test::Routing;

constexpr double kBf16Tolerance = 1e-2;

struct Case {
    std::string name;
    int64_t tokens, hidden, inter, experts, top_k;
    Routing routing;
};

// One problem: host inputs, their device copies, outputs and workspace.
struct Problem {
    Case c;
    std::vector<core::Bf16> x, w13, w2;
    test::RoutingTable routing;
    DeviceBuffer d_x, d_w13, d_w2, d_ids, d_weights, d_out, d_ws;  // d_w13, d_w2 packed (moePackWeightsCuda)

    Problem(const Case& kase, std::mt19937& rng) : c(kase) {
        x = test::randomBf16(static_cast<size_t>(c.tokens * c.hidden), 1.0f, rng);
        // Scales keep h and y of order one, so the relative errors measure the kernels, not cancellation.
        w13 =
            test::randomBf16(static_cast<size_t>(c.experts * 2 * c.inter * c.hidden), 2.0f / std::sqrt(c.hidden), rng);
        w2 = test::randomBf16(static_cast<size_t>(c.experts * c.hidden * c.inter), 2.0f / std::sqrt(c.inter), rng);
        routing = test::makeRouting(c.tokens, c.experts, c.top_k, c.routing, rng);
        d_x = DeviceBuffer::from(x);
        d_ids = DeviceBuffer::from(routing.ids);
        d_weights = DeviceBuffer::from(routing.weights);
        d_out = DeviceBuffer(static_cast<size_t>(c.tokens * c.hidden) * 2);
        d_ws = DeviceBuffer(moeCudaWorkspaceBytes(c.tokens, c.top_k, c.experts, c.hidden, c.inter));
        // Packed from row-major copies into poisoned buffers: a block the packing misses (or w2's padding columns,
        // which must be zero) shows in every stage's error.
        const DeviceBuffer row_major_w13 = DeviceBuffer::from(w13);
        const DeviceBuffer row_major_w2 = DeviceBuffer::from(w2);
        const MoePackedWeightBytes packed = moePackedWeightBytes(c.experts, c.hidden, c.inter);
        d_w13 = DeviceBuffer(packed.w13);
        d_w2 = DeviceBuffer(packed.w2);
        d_w13.poison();
        d_w2.poison();
        moePackWeightsCuda(row_major_w13.as<core::Bf16>(), row_major_w2.as<core::Bf16>(), c.experts, c.hidden, c.inter,
                           d_w13.as<core::Bf16>(), d_w2.as<core::Bf16>(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
    }

    MoeParams params() const {
        MoeParams p;
        p.num_tokens = c.tokens;
        p.hidden = c.hidden;
        p.inter = c.inter;
        p.num_experts = c.experts;
        p.top_k = c.top_k;
        p.act_dtype = ActDType::kBf16;
        p.x = d_x.get();
        p.topk_ids = d_ids.as<int32_t>();
        p.topk_weights = d_weights.as<float>();
        p.w13 = d_w13.as<core::Bf16>();
        p.w2 = d_w2.as<core::Bf16>();
        p.out = d_out.get();
        return p;
    }

    void poisonOutputs() {
        d_out.poison();
        d_ws.poison();
    }

    std::vector<float> out() const { return test::toFloat(d_out.download<core::Bf16>(d_out.bytes() / 2)); }
};

std::vector<Case> cases() {
    return {
        {"tiny_model_T1", 1, 64, 32, 8, 2, Routing::kUniform},
        {"T0", 0, 128, 64, 4, 2, Routing::kUniform},
        {"unserved_entries", 29, 128, 64, 4, 2, Routing::kWithUnserved},
        {"none_served", 5, 128, 64, 4, 2, Routing::kNoneServed},
        {"inter_not_multiple_of_64", 37, 256, 96, 16, 4, Routing::kUniform},
        {"all_on_one_expert", 300, 128, 128, 8, 1, Routing::kOneExpert},
        // One tile of more than 256 tokens in wide288 (wgmma N = 272 and 288: n256 plus n16 / n32 from token row 256).
        {"one_expert_270_tokens", 270, 128, 64, 8, 1, Routing::kOneExpert},
        {"one_expert_288_tokens", 288, 128, 64, 8, 1, Routing::kOneExpert},
        {"most_experts_empty", 3, 128, 64, 32, 2, Routing::kUniform},
        {"skewed", 200, 128, 64, 16, 4, Routing::kSkewed},
        {"dense_routing", 513, 192, 64, 8, 8, Routing::kUniform},
        {"skewed_chunked_permute", 1500, 128, 64, 64, 4, Routing::kSkewed},
        {"skewed_many_tiles", 700, 256, 128, 8, 4, Routing::kSkewed},
        {"small_batch_many_rows", 24, 256, 256, 16, 8, Routing::kUniform},
        {"qwen3_30b_a3b_T16", 16, 2048, 768, 128, 8, Routing::kUniform},
        // The 256-row tiles with more than 256 entries and at most 64 per expert: tall128g's cp.async producer takes
        // the item ring, the down kernel per expert and the combine by part (two parts), and a skewed expert has
        // several token tiles.
        {"tall_ring_paths_skewed", 200, 512, 256, 16, 4, Routing::kSkewed},
        // The same with I = 128: two k-blocks per down item, where tall128g's consumers finish items fastest and its
        // producer thread 0 must count their posts while it waits for a stage (ItemDonePoller), or a full post ring
        // would hold the consumers and the stage they release.
        {"tall_ring_paths_inter128", 200, 512, 128, 16, 4, Routing::kSkewed},
    };
}

MoeParams shapeOf(const Case& c) {
    MoeParams p;
    p.num_tokens = c.tokens;
    p.hidden = c.hidden;
    p.inter = c.inter;
    p.num_experts = c.experts;
    p.top_k = c.top_k;
    return p;
}

struct Mode {
    std::string name;
    MoeCudaPlan plan;
};

// kAuto's plan, then every tile of kMoeTiles that divides the case's layer with the plan the planner makes for it and,
// where that differs, the same with its stages replayable alone.
std::vector<Mode> modesFor(const Case& c) {
    const MoeParams p = shapeOf(c);
    std::vector<Mode> modes{{std::string("auto:") + moeTileConfigName(planMoeCuda(p).tile), planMoeCuda(p)}};
    for (const MoeTile& t : kMoeTiles) {
        if (!moeTileFits(t.config, c.hidden, c.inter)) {
            continue;
        }
        const MoeCudaPlan plan = planMoeCuda(p, t.config);
        modes.push_back({t.name, plan});
        const MoeCudaPlan alone = withStagesReplayableAlone(plan);
        if (alone.down_per_expert != plan.down_per_expert || alone.combine_parts != plan.combine_parts) {
            modes.push_back({std::string(t.name) + " stages alone", alone});
        }
    }
    return modes;
}

// The engine's CPU layer (kernels/cpu, moeForwardCpu) on the problem's host data, bf16 in and out.
std::vector<float> engineCpuLayer(const Problem& p) {
    std::vector<core::Bf16> out(static_cast<size_t>(p.c.tokens * p.c.hidden));
    MoeParams params;
    params.num_tokens = p.c.tokens;
    params.hidden = p.c.hidden;
    params.inter = p.c.inter;
    params.num_experts = p.c.experts;
    params.top_k = p.c.top_k;
    params.act_dtype = ActDType::kBf16;
    params.x = p.x.data();
    params.topk_ids = p.routing.ids.data();
    params.topk_weights = p.routing.weights.data();
    params.w13 = p.w13.data();
    params.w2 = p.w2.data();
    params.out = out.data();
    moeForwardCpu(params);
    return test::toFloat(out);
}

struct PermuteResult {
    std::vector<int32_t> count, slot_offset, tile_offset, entry_slot, slot_token;
};

// Checks the permute stage against the routing table: counts, offsets, a bijection entries <-> slots inside
// each expert's range, and the token of every slot.
PermuteResult checkPermutation(const Problem& p, const MoeWorkspaceView& v, int block_tokens) {
    const int64_t e_count = p.c.experts;
    const int64_t entries = p.c.tokens * p.c.top_k;
    PermuteResult r;
    auto download = [](const int32_t* ptr, int64_t n) {
        std::vector<int32_t> h(static_cast<size_t>(n));
        AFD_CUDA_CHECK(cudaMemcpy(h.data(), ptr, h.size() * 4, cudaMemcpyDeviceToHost));
        return h;
    };
    r.count = download(v.expert_count, e_count);
    r.slot_offset = download(v.slot_offset, e_count + 1);
    r.tile_offset = download(v.tile_offset, e_count + 1);
    r.entry_slot = download(v.entry_slot, entries);
    r.slot_token = download(v.slot_token, entries);

    std::vector<int32_t> want_count(static_cast<size_t>(e_count), 0);
    for (int32_t id : p.routing.ids) {
        if (id >= 0) {
            ++want_count[static_cast<size_t>(id)];
        }
    }
    EXPECT_EQ(r.count, want_count);
    int32_t slot_sum = 0;
    int32_t tile_sum = 0;
    for (int64_t e = 0; e < e_count; ++e) {
        EXPECT_EQ(r.slot_offset[static_cast<size_t>(e)], slot_sum) << "expert " << e;
        EXPECT_EQ(r.tile_offset[static_cast<size_t>(e)], tile_sum) << "expert " << e;
        slot_sum += want_count[static_cast<size_t>(e)];
        // One tile up to block_tokens; beyond, tiles of 256 for the tiles over 256 tokens (wide288).
        const int32_t count = want_count[static_cast<size_t>(e)];
        const int32_t multi = block_tokens > 256 ? 256 : block_tokens;
        tile_sum += count <= block_tokens ? (count > 0 ? 1 : 0) : (count + multi - 1) / multi;
    }
    EXPECT_EQ(r.slot_offset[static_cast<size_t>(e_count)], slot_sum);
    EXPECT_EQ(r.tile_offset[static_cast<size_t>(e_count)], tile_sum);
    std::vector<int> seen(static_cast<size_t>(slot_sum), 0);
    for (int64_t i = 0; i < entries; ++i) {
        const int32_t id = p.routing.ids[static_cast<size_t>(i)];
        const int32_t slot = r.entry_slot[static_cast<size_t>(i)];
        if (id < 0) {
            EXPECT_EQ(slot, -1) << "entry " << i;
            continue;
        }
        const bool in_range =
            slot >= r.slot_offset[static_cast<size_t>(id)] && slot < r.slot_offset[static_cast<size_t>(id) + 1];
        EXPECT_TRUE(in_range) << "entry " << i << " slot " << slot << " outside expert " << id;
        if (!in_range) {
            continue;
        }
        ++seen[static_cast<size_t>(slot)];
        EXPECT_EQ(r.slot_token[static_cast<size_t>(slot)], i / p.c.top_k) << "entry " << i;
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << "slots are not a bijection";
    return r;
}

TEST(MoeCudaTest, StagesAndLayerMatchCpuOnManyShapesAndConfigs) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(20240611);
    for (const Case& c : cases()) {
        SCOPED_TRACE(c.name);
        Problem p(c, rng);
        const auto ref_h = test::referenceGateUp(p.x, p.w13, p.routing.ids, c.tokens, c.hidden, c.inter, c.top_k);
        const auto ref_out = test::referenceMoe(p.x, p.w13, p.w2, p.routing, c.tokens, c.hidden, c.inter, c.top_k);
        const auto cpu_layer = engineCpuLayer(p);
        for (const Mode& mode : modesFor(c)) {
            const MoeCudaPlan& plan = mode.plan;
            SCOPED_TRACE(testing::Message() << mode.name << (plan.fused_routing ? " fused routing" : "")
                                            << (plan.fused_combine ? " fused combine" : "")
                                            << (plan.down_per_expert ? " down per expert" : "") << " combine parts "
                                            << plan.combine_parts);
            const MoeParams params = p.params();
            const MoeWorkspaceView view = moeWorkspaceView(params, p.d_ws.get(), p.d_ws.bytes());

            p.poisonOutputs();
            moePermuteCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            if (c.tokens == 0) {
                moeForwardCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
                AFD_CUDA_CHECK(cudaDeviceSynchronize());
                continue;
            }
            // gate-up + SwiGLU against the fp32 reference of every served entry (the permutation is checked after
            // it: with fused small routing the gate-up kernel writes it)
            moeGateUpCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            const PermuteResult perm = checkPermutation(p, view, moeTileShape(plan.tile).block_tokens);
            const int32_t slots = perm.slot_offset.back();
            std::vector<core::Bf16> h_bits(static_cast<size_t>(slots * c.inter));
            AFD_CUDA_CHECK(cudaMemcpy(h_bits.data(), view.h, h_bits.size() * 2, cudaMemcpyDeviceToHost));
            const std::vector<float> h = test::toFloat(h_bits);
            std::vector<float> got_h;
            std::vector<float> want_h;
            for (size_t i = 0; i < perm.entry_slot.size(); ++i) {
                const int32_t slot = perm.entry_slot[i];
                if (slot < 0) {
                    continue;
                }
                got_h.insert(got_h.end(), h.begin() + slot * c.inter, h.begin() + (slot + 1) * c.inter);
                want_h.insert(want_h.end(), ref_h[i].begin(), ref_h[i].end());
            }
            EXPECT_LT(test::relativeL2(got_h, want_h), kBf16Tolerance) << "gate-up";

            // down against W2 applied to the device's own h (isolates the stage)
            moeDownCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<core::Bf16> y_bits(static_cast<size_t>(slots * c.hidden));
            AFD_CUDA_CHECK(cudaMemcpy(y_bits.data(), view.y, y_bits.size() * 2, cudaMemcpyDeviceToHost));
            const std::vector<float> y = test::toFloat(y_bits);
            std::vector<float> want_y;
            for (int32_t slot = 0; slot < slots; ++slot) {
                int64_t expert = 0;
                while (perm.slot_offset[static_cast<size_t>(expert) + 1] <= slot) {
                    ++expert;
                }
                const auto row = test::referenceDownRow(p.w2, expert, h.data() + slot * c.inter, c.hidden, c.inter);
                want_y.insert(want_y.end(), row.begin(), row.end());
            }
            EXPECT_LT(test::relativeL2(y, want_y), kBf16Tolerance) << "down";

            // combine against the weighted sum of the device's own y
            moeCombineCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> want_combine(static_cast<size_t>(c.tokens * c.hidden), 0.0f);
            for (size_t i = 0; i < perm.entry_slot.size(); ++i) {
                const int32_t slot = perm.entry_slot[i];
                if (slot < 0) {
                    continue;
                }
                const int64_t t = static_cast<int64_t>(i) / c.top_k;
                for (int64_t r = 0; r < c.hidden; ++r) {
                    want_combine[static_cast<size_t>(t * c.hidden + r)] +=
                        p.routing.weights[i] * y[static_cast<size_t>(slot * c.hidden + r)];
                }
            }
            EXPECT_LT(test::relativeL2(p.out(), want_combine), kBf16Tolerance) << "combine";

            // the whole layer against the fp32 layer
            p.poisonOutputs();
            moeForwardCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
            AFD_CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> out = p.out();
            EXPECT_LT(test::relativeL2(out, ref_out), kBf16Tolerance) << "layer vs fp32 reference";
            EXPECT_LT(test::relativeL2(out, cpu_layer), kBf16Tolerance) << "layer vs the engine's CPU layer";
            for (int64_t t = 0; t < c.tokens; ++t) {
                bool served = false;
                for (int64_t j = 0; j < c.top_k; ++j) {
                    served = served || p.routing.ids[static_cast<size_t>(t * c.top_k + j)] >= 0;
                }
                if (!served) {
                    for (int64_t r = 0; r < c.hidden; ++r) {
                        ASSERT_EQ(out[static_cast<size_t>(t * c.hidden + r)], 0.0f) << "unserved token " << t;
                    }
                }
            }
        }
    }
}

// The layer captured once in a CUDA graph reads the routing at replay time: new ids, same graph, new result.
// 2800 entries take the chunked permute; 80 entries the routing fused into the GEMM kernels.
TEST(MoeCudaTest, GraphReplayFollowsNewRouting) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(77);
    for (const int64_t tokens : {700, 20}) {
        SCOPED_TRACE(testing::Message() << "T " << tokens);
        Problem p({"graph", tokens, 256, 128, 16, 4, Routing::kUniform}, rng);
        const MoeParams params = p.params();
        cudaStream_t stream = nullptr;
        AFD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        moeForwardCuda(params, p.d_ws.get(), p.d_ws.bytes(), stream);  // eager warm-up (module load)
        AFD_CUDA_CHECK(cudaStreamSynchronize(stream));

        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        moeForwardCuda(params, p.d_ws.get(), p.d_ws.bytes(), stream);
        AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        AFD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

        for (const Routing routing : {Routing::kUniform, Routing::kSkewed, Routing::kOneExpert}) {
            p.routing = test::makeRouting(p.c.tokens, p.c.experts, p.c.top_k, routing, rng);
            p.d_ids.upload(p.routing.ids.data(), p.routing.ids.size() * 4);
            p.d_weights.upload(p.routing.weights.data(), p.routing.weights.size() * 4);
            p.poisonOutputs();
            AFD_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
            const auto want =
                test::referenceMoe(p.x, p.w13, p.w2, p.routing, p.c.tokens, p.c.hidden, p.c.inter, p.c.top_k);
            EXPECT_LT(test::relativeL2(p.out(), want), kBf16Tolerance);
        }
        AFD_CUDA_CHECK(cudaGraphExecDestroy(exec));
        AFD_CUDA_CHECK(cudaGraphDestroy(graph));
        AFD_CUDA_CHECK(cudaStreamDestroy(stream));
    }
}

// A GEMM stage replayed alone (as the benchmark times it) after a whole layer finds its dynamic-schedule counters
// reset by its own previous launch: every replay serves every item and gives the same bits.
TEST(MoeCudaTest, StagesReplayedAloneServeEveryItem) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(91);
    Problem p({"replay", 900, 256, 128, 8, 4, Routing::kSkewed}, rng);
    const MoeParams params = p.params();
    for (const MoeTileConfig tile : {MoeTileConfig::kWide128, MoeTileConfig::kWide256, MoeTileConfig::kWide288,
                                     MoeTileConfig::kTall128, MoeTileConfig::kTall128Gather}) {
        SCOPED_TRACE(moeTileConfigName(tile));
        // The down stage replayed without its gate-up stage.
        const MoeCudaPlan plan = withStagesReplayableAlone(planMoeCuda(params, tile));
        const MoeWorkspaceView view = moeWorkspaceView(params, p.d_ws.get(), p.d_ws.bytes());
        p.poisonOutputs();
        moeForwardCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> want = p.out();
        using StageFn = void (*)(const MoeParams&, const MoeCudaPlan&, void*, size_t, void*);
        // Runs `stage` alone `replays` times over a poisoned `out` and expects the first layer's bits each time.
        auto replayAlone = [&](StageFn stage, void* out, size_t bytes, int replays, const char* name) {
            std::vector<uint16_t> first(bytes / 2);
            AFD_CUDA_CHECK(cudaMemcpy(first.data(), out, bytes, cudaMemcpyDeviceToHost));
            for (int replay = 0; replay < replays; ++replay) {
                AFD_CUDA_CHECK(cudaMemset(out, 0xff, bytes));
                stage(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
                AFD_CUDA_CHECK(cudaDeviceSynchronize());
                std::vector<uint16_t> again(bytes / 2);
                AFD_CUDA_CHECK(cudaMemcpy(again.data(), out, bytes, cudaMemcpyDeviceToHost));
                EXPECT_EQ(again, first) << name << " replay " << replay;
            }
        };
        replayAlone(&moeDownCuda, view.y, static_cast<size_t>(900 * 4 * 256) * 2, 3, "down");
        replayAlone(&moeGateUpCuda, view.h, static_cast<size_t>(900 * 4 * 128) * 2, 2, "gate-up");
        moeCombineCuda(params, plan, p.d_ws.get(), p.d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(p.out(), want);
    }
}

// MoeParams::out_f32: the same sums, unrounded. Rounded to bf16 they are the bf16 layer's output bit for bit, for the
// combine kernel, the combine by part and where bf16 output takes the fused combine (which FP32 sums never take).
TEST(MoeCudaTest, Fp32SumsRoundToTheBf16LayersOutput) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(77);
    for (const Case& c : {Case{"fused_combine_T1", 1, 64, 32, 8, 2, Routing::kUniform},
                          Case{"qwen3_T1", 1, 2048, 768, 128, 8, Routing::kUniform},
                          Case{"combine_kernel", 29, 128, 64, 4, 2, Routing::kWithUnserved},
                          Case{"tall_ring_paths_skewed", 200, 512, 256, 16, 4, Routing::kSkewed}}) {
        SCOPED_TRACE(c.name);
        Problem p(c, rng);
        MoeParams params = p.params();
        p.poisonOutputs();
        moeForwardCuda(params, p.d_ws.get(), p.d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<core::Bf16> bf16_out = p.d_out.download<core::Bf16>(static_cast<size_t>(c.tokens * c.hidden));
        params.out_f32 = true;
        EXPECT_FALSE(planMoeCuda(params).fused_combine);
        DeviceBuffer out_f32(static_cast<size_t>(c.tokens * c.hidden) * 4);
        out_f32.poison();
        params.out = out_f32.get();
        moeForwardCuda(params, p.d_ws.get(), p.d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> sums = out_f32.download<float>(static_cast<size_t>(c.tokens * c.hidden));
        for (size_t i = 0; i < sums.size(); ++i) {
            ASSERT_EQ(core::Bf16(sums[i]).bits, bf16_out[i].bits) << "element " << i << " sum " << sums[i];
        }
    }
}

// Widths that are not a multiple of 32 (hf_crosscheck's experts64_top8 has moe_intermediate_size 16; a dense MLP
// of 44; a width of 7, not even a multiple of 8): packed from their row-major tensors at moePackedWidth with zeros, the
// layer at the packed width gives the unpadded layer's output.
TEST(MoeCudaTest, NarrowWidthsPackedWithZerosGiveTheUnpaddedLayer) {
    AFD_REQUIRE_SM90();
    std::mt19937 rng(31);
    for (const Case& c : {Case{"moe_width_16", 37, 64, 16, 64, 8, Routing::kUniform},
                          Case{"dense_width_44", 21, 128, 44, 1, 1, Routing::kOneExpert},
                          Case{"width_7", 9, 64, 7, 4, 2, Routing::kWithUnserved}}) {
        SCOPED_TRACE(c.name);
        const int64_t packed = moePackedWidth(c.inter);
        ASSERT_EQ(packed % 32, 0);
        const auto x = test::randomBf16(static_cast<size_t>(c.tokens * c.hidden), 1.0f, rng);
        const auto w13 =
            test::randomBf16(static_cast<size_t>(c.experts * 2 * c.inter * c.hidden), 2.0f / std::sqrt(c.hidden), rng);
        const auto w2 =
            test::randomBf16(static_cast<size_t>(c.experts * c.hidden * c.inter), 2.0f / std::sqrt(c.inter), rng);
        const test::RoutingTable routing = test::makeRouting(c.tokens, c.experts, c.top_k, c.routing, rng);
        const DeviceBuffer row_major_w13 = DeviceBuffer::from(w13);
        const DeviceBuffer row_major_w2 = DeviceBuffer::from(w2);
        const MoePackedWeightBytes bytes = moePackedWeightBytes(c.experts, c.hidden, c.inter);
        EXPECT_EQ(bytes.w13, moePackedWeightBytes(c.experts, c.hidden, packed).w13);
        DeviceBuffer d_w13(bytes.w13), d_w2(bytes.w2);
        d_w13.poison();  // a padded row or column the packing misses is NaN in the output
        d_w2.poison();
        moePackWeightsCuda(row_major_w13.as<core::Bf16>(), row_major_w2.as<core::Bf16>(), c.experts, c.hidden, c.inter,
                           d_w13.as<core::Bf16>(), d_w2.as<core::Bf16>(), nullptr);
        DeviceBuffer d_x = DeviceBuffer::from(x);
        DeviceBuffer d_ids = DeviceBuffer::from(routing.ids);
        DeviceBuffer d_weights = DeviceBuffer::from(routing.weights);
        DeviceBuffer d_out(static_cast<size_t>(c.tokens * c.hidden) * 2);
        DeviceBuffer d_ws(moeCudaWorkspaceBytes(c.tokens, c.top_k, c.experts, c.hidden, packed));
        d_out.poison();
        d_ws.poison();
        MoeParams p;
        p.num_tokens = c.tokens;
        p.hidden = c.hidden;
        p.inter = packed;
        p.num_experts = c.experts;
        p.top_k = c.top_k;
        p.act_dtype = ActDType::kBf16;
        p.x = d_x.get();
        p.topk_ids = d_ids.as<int32_t>();
        p.topk_weights = d_weights.as<float>();
        p.w13 = d_w13.as<core::Bf16>();
        p.w2 = d_w2.as<core::Bf16>();
        p.out = d_out.get();
        moeForwardCuda(p, d_ws.get(), d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got =
            test::toFloat(d_out.download<core::Bf16>(static_cast<size_t>(c.tokens * c.hidden)));
        const std::vector<float> want = test::referenceMoe(x, w13, w2, routing, c.tokens, c.hidden, c.inter, c.top_k);
        EXPECT_LT(test::relativeL2(got, want), kBf16Tolerance);
    }
}

// Error paths: checked before any device work, so they run without a GPU too.
MoeParams validParams() {
    MoeParams p;
    p.num_tokens = 4;
    p.hidden = 128;
    p.inter = 64;
    p.num_experts = 8;
    p.top_k = 2;
    p.act_dtype = ActDType::kBf16;
    static int dummy[64];
    p.x = dummy;
    p.topk_ids = reinterpret_cast<const int32_t*>(dummy);
    p.topk_weights = reinterpret_cast<const float*>(dummy);
    p.w13 = reinterpret_cast<const core::Bf16*>(dummy);
    p.w2 = reinterpret_cast<const core::Bf16*>(dummy);
    p.out = dummy;
    return p;
}

TEST(MoeCudaTest, RejectsFloatActivations) {
    MoeParams p = validParams();
    p.act_dtype = ActDType::kF32;
    EXPECT_THROW(moeForwardCuda(p, nullptr, 0, nullptr), core::Error);
}

TEST(MoeCudaTest, RejectsTooSmallWorkspace) {
    const MoeParams p = validParams();
    alignas(256) static uint8_t small[256];
    EXPECT_THROW(moeForwardCuda(p, small, sizeof(small), nullptr), core::Error);
}

TEST(MoeCudaTest, RejectsAPlanWithoutATile) {
    const MoeCudaPlan plan;  // not made by planMoeCuda: kAuto names no tile
    EXPECT_THROW(moeForwardCuda(validParams(), plan, nullptr, 0, nullptr), core::Error);
}

TEST(MoeCudaTest, RejectsHiddenNotMultipleOf64) {
    MoeParams p = validParams();
    p.hidden = 96;
    EXPECT_THROW(moeForwardCuda(p, nullptr, 0, nullptr), core::Error);
}

}  // namespace
}  // namespace afd::kernels
