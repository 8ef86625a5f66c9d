// Router and MoE CPU references against per-token double-precision loops written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "kernel_test_util.h"
#include "kernels/moe.h"
#include "kernels/router.h"

namespace afd::kernels {
namespace {

using testing::randomBf16;
using testing::randomFloats;
using testing::relL2;

std::vector<double> referenceMoe(const std::vector<float>& x, const std::vector<int32_t>& ids,
                                 const std::vector<float>& w, const std::vector<core::Bf16>& w13,
                                 const std::vector<core::Bf16>& w2, int T, int H, int I, int K) {
    std::vector<double> out(static_cast<size_t>(T * H), 0.0);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < K; ++j) {
            const int e = ids[t * K + j];
            if (e < 0) continue;
            std::vector<double> h(I);
            for (int i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int k = 0; k < H; ++k) {
                    g += double(x[t * H + k]) * w13[(size_t(e) * 2 * I + i) * H + k].toFloat();
                    u += double(x[t * H + k]) * w13[(size_t(e) * 2 * I + I + i) * H + k].toFloat();
                }
                h[i] = g / (1 + std::exp(-g)) * u;
            }
            for (int o = 0; o < H; ++o) {
                double y = 0;
                for (int i = 0; i < I; ++i) y += h[i] * w2[(size_t(e) * H + o) * I + i].toFloat();
                out[t * H + o] += w[t * K + j] * y;
            }
        }
    return out;
}

struct MoeCase {
    int T, H, I, E, K;
    bool skip_some;   // some entries -1 (not served here)
    bool one_expert;  // all tokens on expert 0
};

TEST(MoeCpu, MatchesPerTokenReference) {
    std::mt19937 rng(5);
    for (const MoeCase& c : {MoeCase{0, 16, 8, 4, 2, false, false}, MoeCase{1, 16, 8, 4, 2, false, false},
                             MoeCase{9, 32, 24, 6, 3, true, false}, MoeCase{300, 16, 8, 8, 2, false, false},
                             MoeCase{20, 16, 8, 5, 2, false, true}}) {
        auto x = randomFloats(rng, size_t(c.T * c.H));
        auto w13 = randomBf16(rng, size_t(c.E * 2 * c.I * c.H), 0.2f);
        auto w2 = randomBf16(rng, size_t(c.E * c.H * c.I), 0.2f);
        std::vector<int32_t> ids(size_t(c.T * c.K));
        std::vector<float> wts(ids.size());
        for (int t = 0; t < c.T; ++t) {
            std::vector<int32_t> perm(c.E);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int j = 0; j < c.K; ++j) {
                ids[t * c.K + j] = c.one_expert ? (j == 0 ? 0 : -1) : perm[j];
                if (c.skip_some && (t + j) % 3 == 0) ids[t * c.K + j] = -1;
                wts[t * c.K + j] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
            }
        }
        std::vector<float> out(size_t(c.T * c.H), NAN);
        MoeParams p;
        p.num_tokens = c.T, p.hidden = c.H, p.inter = c.I, p.num_experts = c.E, p.top_k = c.K;
        p.x = x.data(), p.topk_ids = ids.data(), p.topk_weights = wts.data(), p.w13 = w13.data(), p.w2 = w2.data();
        p.out = out.data();
        moeForwardCpu(p);
        auto ref = referenceMoe(x, ids, wts, w13, w2, c.T, c.H, c.I, c.K);
        if (c.T > 0) {
            EXPECT_LT(relL2(out, ref), 1e-5) << "T=" << c.T;
        }
        for (float v : out) ASSERT_FALSE(std::isnan(v));
    }
}

TEST(MoeCpu, Bf16ActivationsRoundOnce) {
    std::mt19937 rng(6);
    const int T = 7, H = 16, I = 8, E = 3, K = 2;
    auto xf = randomFloats(rng, T * H);
    std::vector<core::Bf16> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = core::Bf16(xf[i]), xf[i] = xb[i].toFloat();
    auto w13 = randomBf16(rng, E * 2 * I * H, 0.3f);
    auto w2 = randomBf16(rng, E * H * I, 0.3f);
    std::vector<int32_t> ids = {0, 1, 1, 2, 2, 0, 0, 2, 1, 0, 2, 1, 0, 1};
    std::vector<float> wts(ids.size(), 0.5f);
    std::vector<core::Bf16> out(T * H);
    MoeParams p;
    p.num_tokens = T, p.hidden = H, p.inter = I, p.num_experts = E, p.top_k = K, p.act_dtype = ActDType::kBf16;
    p.x = xb.data(), p.topk_ids = ids.data(), p.topk_weights = wts.data(), p.w13 = w13.data(), p.w2 = w2.data();
    p.out = out.data();
    moeForwardCpu(p);
    auto ref = referenceMoe(xf, ids, wts, w13, w2, T, H, I, K);
    std::vector<float> outf(out.size());
    for (size_t i = 0; i < out.size(); ++i) outf[i] = out[i].toFloat();
    EXPECT_LT(relL2(outf, ref), 8e-3);
}

// out_f32 leaves the sums unrounded; bf16_intermediates rounds each expert's h and y as the CUDA kernels store them:
// close to the unrounded layer, and not equal to it.
TEST(MoeCpu, Fp32SumsAndBf16Intermediates) {
    std::mt19937 rng(8);
    const int T = 5, H = 32, I = 16, E = 4, K = 2;
    auto x = randomFloats(rng, T * H);
    auto w13 = randomBf16(rng, E * 2 * I * H, 0.3f);
    auto w2 = randomBf16(rng, E * H * I, 0.3f);
    std::vector<int32_t> ids = {0, 1, 2, 3, 1, 2, 3, 0, 0, 2};
    std::vector<float> wts(ids.size(), 0.5f);
    std::vector<float> plain(T * H), rounded(T * H);
    MoeParams p;
    p.num_tokens = T, p.hidden = H, p.inter = I, p.num_experts = E, p.top_k = K;
    p.x = x.data(), p.topk_ids = ids.data(), p.topk_weights = wts.data(), p.w13 = w13.data(), p.w2 = w2.data();
    p.out = plain.data();
    p.out_f32 = true;
    moeForwardCpu(p);
    EXPECT_LT(relL2(plain, referenceMoe(x, ids, wts, w13, w2, T, H, I, K)), 1e-5);
    p.out = rounded.data();
    p.bf16_intermediates = true;
    moeForwardCpu(p);
    EXPECT_LT(relL2(rounded, std::vector<double>(plain.begin(), plain.end())), 8e-3);
    EXPECT_NE(rounded, plain);
}

TEST(MoeCpu, RejectsExpertIdOutOfRange) {
    std::vector<float> x(4), out(4);
    std::vector<core::Bf16> w13(2 * 2 * 4), w2(4 * 2);
    std::vector<int32_t> ids = {1};
    std::vector<float> wts = {1};
    MoeParams p;
    p.num_tokens = 1, p.hidden = 4, p.inter = 2, p.num_experts = 1, p.top_k = 1;
    p.x = x.data(), p.topk_ids = ids.data(), p.topk_weights = wts.data(), p.w13 = w13.data(), p.w2 = w2.data();
    p.out = out.data();
    EXPECT_THROW(moeForwardCpu(p), core::Error);
}

TEST(RouterCpu, SoftmaxTopKAndRenormalisation) {
    std::mt19937 rng(7);
    const int T = 5, H = 24, E = 10, K = 3;
    auto x = randomFloats(rng, T * H);
    auto gw = randomBf16(rng, E * H);
    for (bool norm : {true, false}) {
        std::vector<float> logits(T * E);
        std::vector<int32_t> ids(T * K);
        std::vector<float> wts(T * K);
        RouterParams p;
        p.num_tokens = T, p.hidden = H, p.num_experts = E, p.top_k = K, p.norm_topk_prob = norm;
        p.x = x.data(), p.gate_w = gw.data(), p.logits = logits.data(), p.topk_ids = ids.data();
        p.topk_weights = wts.data();
        routerForwardCpu(p);
        for (int t = 0; t < T; ++t) {
            std::vector<double> prob(E);
            double mx = -1e300, den = 0;
            for (int e = 0; e < E; ++e) {
                double l = 0;
                for (int k = 0; k < H; ++k) l += double(x[t * H + k]) * gw[e * H + k].toFloat();
                EXPECT_NEAR(logits[t * E + e], l, 1e-4);
                prob[e] = l, mx = std::max(mx, l);
            }
            for (auto& v : prob) den += (v = std::exp(v - mx));
            for (auto& v : prob) v /= den;
            std::vector<int> order(E);
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
            double sum = 0;
            for (int j = 0; j < K; ++j) sum += prob[order[j]];
            for (int j = 0; j < K; ++j) {
                EXPECT_EQ(ids[t * K + j], order[j]);
                EXPECT_NEAR(wts[t * K + j], norm ? prob[order[j]] / sum : prob[order[j]], 1e-6);
            }
        }
    }
}

}  // namespace
}  // namespace afd::kernels
