// Harness of the CUDA router against the fp32 CPU reference: logits, top-k choice and weights on fresh random
// inputs of several shapes (one to 32 reduction splits, one or two expert tiles, a hidden size that is not a whole
// number of 64-element chunks), with and without renormalisation, outputs and workspace poisoned first; plus the
// error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/moe_cuda.h"
#include "kernels_cuda/cuda_test_util.h"

namespace afd::kernels {
namespace {

using test::DeviceBuffer;

struct RouterCase {
    int64_t tokens, hidden, experts, top_k;
    bool renormalize;
    bool with_logits;
};

TEST(RouterCudaTest, MatchesCpuReference) {
    if (cuda::deviceCount() == 0) {
        GTEST_SKIP() << "no CUDA device";
    }
    std::mt19937 rng(4242);
    const std::vector<RouterCase> cases = {
        {1, 64, 32, 1, true, true},
        {7, 128, 128, 8, true, true},
        {16, 2048, 128, 8, true, true},
        {33, 256, 256, 8, false, true},
        {200, 512, 64, 2, true, false},
        {5, 96, 32, 32, false, true},
        {1000, 2048, 128, 8, true, true},
        {5000, 2048, 128, 8, true, false},
        {70, 1024, 256, 8, true, true},
        {40, 512, 96, 4, true, true},
        {9, 256, 224, 8, false, true},
        // Expert counts that are not multiples of 32 (the tiny fixture's 8; odd counts store logits one by one).
        {3, 64, 8, 2, true, true},
        {300, 64, 8, 2, true, true},
        {17, 128, 7, 3, false, true},
        {5, 256, 33, 8, true, true},
        {260, 512, 129, 8, true, true},
        {2, 64, 1, 1, true, true},
    };
    for (const RouterCase& c : cases) {
        SCOPED_TRACE(testing::Message() << "T " << c.tokens << " H " << c.hidden << " E " << c.experts << " K "
                                        << c.top_k << " renorm " << c.renormalize);
        const auto x = test::randomBf16(static_cast<size_t>(c.tokens * c.hidden), 1.0f, rng);
        const auto gate_w =
            test::randomBf16(static_cast<size_t>(c.experts * c.hidden), 3.0f / std::sqrt(c.hidden), rng);
        const auto ref = test::referenceRouter(x, gate_w, c.tokens, c.hidden, c.experts, c.top_k, c.renormalize);

        DeviceBuffer d_x = DeviceBuffer::from(x);
        DeviceBuffer d_w = DeviceBuffer::from(gate_w);
        DeviceBuffer d_logits(static_cast<size_t>(c.tokens * c.experts) * 4);
        DeviceBuffer d_ids(static_cast<size_t>(c.tokens * c.top_k) * 4);
        DeviceBuffer d_weights(static_cast<size_t>(c.tokens * c.top_k) * 4);
        DeviceBuffer d_ws(routerCudaWorkspaceBytes(c.tokens, c.hidden, c.experts));
        d_ws.poison();
        d_logits.poison();
        d_ids.poison();
        d_weights.poison();
        RouterParams p;
        p.num_tokens = c.tokens;
        p.hidden = c.hidden;
        p.num_experts = c.experts;
        p.top_k = c.top_k;
        p.norm_topk_prob = c.renormalize;
        p.act_dtype = ActDType::kBf16;
        p.x = d_x.get();
        p.gate_w = d_w.as<core::Bf16>();
        p.logits = c.with_logits ? d_logits.as<float>() : nullptr;
        p.topk_ids = d_ids.as<int32_t>();
        p.topk_weights = d_weights.as<float>();
        routerForwardCuda(p, d_ws.get(), d_ws.bytes(), nullptr);
        AFD_CUDA_CHECK(cudaDeviceSynchronize());

        if (c.with_logits) {
            EXPECT_LT(test::relativeL2(d_logits.download<float>(ref.logits.size()), ref.logits), 1e-4);
        }
        const auto ids = d_ids.download<int32_t>(ref.ids.size());
        const auto weights = d_weights.download<float>(ref.weights.size());
        // The choice must match the reference up to exchanges of near-tied experts: every chosen expert's
        // reference probability is at least the reference k-th probability (minus rounding), with no repeats.
        for (int64_t t = 0; t < c.tokens; ++t) {
            const float* probs = ref.probs.data() + t * c.experts;
            const float kth = probs[ref.ids[static_cast<size_t>(t * c.top_k + c.top_k - 1)]];
            std::vector<int32_t> chosen(ids.begin() + t * c.top_k, ids.begin() + (t + 1) * c.top_k);
            for (int32_t e : chosen) {
                ASSERT_GE(e, 0);
                ASSERT_LT(e, c.experts);
                EXPECT_GE(probs[e], kth - 1e-6f) << "token " << t << " expert " << e;
            }
            std::sort(chosen.begin(), chosen.end());
            EXPECT_TRUE(std::adjacent_find(chosen.begin(), chosen.end()) == chosen.end()) << "token " << t;
        }
        EXPECT_LT(test::relativeL2(weights, ref.weights), 1e-4);

        // The engine's CPU router (kernels/cpu, routerForwardCpu) on the same inputs.
        std::vector<int32_t> cpu_ids(ref.ids.size());
        std::vector<float> cpu_weights(ref.weights.size());
        RouterParams cpu = p;
        cpu.x = x.data();
        cpu.gate_w = gate_w.data();
        cpu.logits = nullptr;
        cpu.topk_ids = cpu_ids.data();
        cpu.topk_weights = cpu_weights.data();
        routerForwardCpu(cpu);
        EXPECT_LT(test::relativeL2(weights, cpu_weights), 1e-4) << "vs the engine's CPU router";
        int same = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            same += ids[i] == cpu_ids[i] ? 1 : 0;
        }
        EXPECT_GE(same, static_cast<int>(ids.size()) - static_cast<int>(c.tokens) / 50)
            << "ids differ from the engine's CPU router beyond near ties";
    }
}

// Two tokens on pointers that are never dereferenced: the error paths are checked before any launch.
RouterParams paramsForErrorPaths(int64_t experts) {
    static int dummy[16];
    RouterParams p;
    p.num_tokens = 2;
    p.hidden = 64;
    p.num_experts = experts;
    p.top_k = 2;
    p.act_dtype = ActDType::kBf16;
    p.x = dummy;
    p.gate_w = reinterpret_cast<const core::Bf16*>(dummy);
    p.topk_ids = dummy;
    p.topk_weights = reinterpret_cast<float*>(dummy);
    return p;
}

TEST(RouterCudaTest, RejectsExpertCountsOutsideOneTo256) {
    static int workspace[16];
    EXPECT_THROW(routerForwardCuda(paramsForErrorPaths(0), workspace, sizeof(workspace), nullptr), core::Error);
    EXPECT_THROW(routerForwardCuda(paramsForErrorPaths(257), workspace, sizeof(workspace), nullptr), core::Error);
}

TEST(RouterCudaTest, RejectsTooSmallWorkspace) {
    static int workspace[4];
    const RouterParams p = paramsForErrorPaths(32);
    ASSERT_GT(routerCudaWorkspaceBytes(2, 64, 32), sizeof(workspace));
    EXPECT_THROW(routerForwardCuda(p, workspace, sizeof(workspace), nullptr), core::Error);
    EXPECT_THROW(routerForwardCuda(p, nullptr, routerCudaWorkspaceBytes(2, 64, 32), nullptr), core::Error);
}

// A workspace sized for T serves every smaller batch (the FFN rank sizes it once for its largest).
TEST(RouterCudaTest, WorkspaceForTServesEverySmallerT) {
    for (const auto& [hidden, experts] : {std::pair<int64_t, int64_t>{2048, 128}, {1024, 256}, {96, 32}}) {
        size_t most = 0;
        for (int64_t t = 1; t <= 3000; ++t) {
            const size_t bytes = routerCudaWorkspaceBytes(t, hidden, experts);
            EXPECT_GE(bytes, most) << "T " << t << " H " << hidden << " E " << experts;
            most = std::max(most, bytes);
        }
    }
}

TEST(RouterCudaTest, RejectsFloatActivations) {
    RouterParams p;
    p.num_tokens = 2;
    p.act_dtype = ActDType::kF32;
    EXPECT_THROW(routerForwardCuda(p, nullptr, 0, nullptr), core::Error);
}

}  // namespace
}  // namespace afd::kernels
