// CPU reference ops against straightforward double-precision loops written here.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"

namespace afd::kernels {
namespace {

using testing::randomBf16;
using testing::randomFloats;
using testing::relL2;

TEST(LinearCpu, MatchesDoubleReferenceAndIsBatchInvariant) {
    std::mt19937 rng(1);
    for (auto [M, K, N] : {std::tuple{1, 7, 3}, {5, 64, 40}, {17, 129, 33}}) {
        auto x = randomFloats(rng, static_cast<size_t>(M * K));
        auto w = randomBf16(rng, static_cast<size_t>(N * K));
        auto bias = randomBf16(rng, static_cast<size_t>(N));
        std::vector<float> y(static_cast<size_t>(M * N), NAN);
        linearCpu({M, K, N, x.data(), w.data(), bias.data(), y.data()});
        std::vector<double> ref(static_cast<size_t>(M * N));
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
                double s = bias[n].toFloat();
                for (int k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k].toFloat();
                ref[m * N + n] = s;
            }
        EXPECT_LT(relL2(y, ref), 1e-6);
        // The last row computed alone gives the same bits.
        std::vector<float> alone(static_cast<size_t>(N), NAN);
        linearCpu({1, K, N, x.data() + (M - 1) * K, w.data(), bias.data(), alone.data()});
        for (int n = 0; n < N; ++n) EXPECT_EQ(alone[n], y[(M - 1) * N + n]);
    }
}

TEST(RmsNormCpu, MatchesFormulaInPlace) {
    std::mt19937 rng(2);
    const int rows = 3, dim = 48;
    auto x = randomFloats(rng, rows * dim, 3.0f);
    auto w = randomBf16(rng, dim);
    std::vector<double> ref(rows * dim);
    for (int r = 0; r < rows; ++r) {
        double ms = 0;
        for (int i = 0; i < dim; ++i) ms += double(x[r * dim + i]) * x[r * dim + i];
        ms /= dim;
        for (int i = 0; i < dim; ++i) ref[r * dim + i] = w[i].toFloat() * x[r * dim + i] / std::sqrt(ms + 1e-5);
    }
    rmsNormCpu({rows, dim, 1e-5f, x.data(), w.data(), x.data()});
    EXPECT_LT(relL2(x, ref), 1e-6);
}

TEST(RopeCpu, RotatesHalvesByPositionAngle) {
    std::mt19937 rng(3);
    const int T = 4, heads = 2, hd = 8;
    const double theta = 10000.0;
    std::vector<int32_t> pos = {0, 1, 7, 300};
    auto x = randomFloats(rng, T * heads * hd);
    std::vector<double> ref(x.size());
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < hd / 2; ++i) {
                const double ang = pos[t] / std::pow(theta, 2.0 * i / hd);
                const double a = x[(t * heads + h) * hd + i], b = x[(t * heads + h) * hd + i + hd / 2];
                ref[(t * heads + h) * hd + i] = a * std::cos(ang) - b * std::sin(ang);
                ref[(t * heads + h) * hd + i + hd / 2] = b * std::cos(ang) + a * std::sin(ang);
            }
    std::vector<float> c(T * hd / 2), s(T * hd / 2);
    ropeTableCpu(pos.data(), T, hd, theta, c.data(), s.data());
    applyRopeCpu({T, heads, hd, c.data(), s.data(), x.data()});
    EXPECT_LT(relL2(x, ref), 1e-5);
    // Position 0 is the identity.
    EXPECT_FLOAT_EQ(c[0], 1.0f);
    EXPECT_FLOAT_EQ(s[0], 0.0f);
}

TEST(PagedAttentionCpu, MatchesDenseCausalGqa) {
    std::mt19937 rng(4);
    const int heads = 4, kv_heads = 2, hd = 8, block = 4;
    // Two sequences of lengths 6 and 3, blocks scattered in the pool.
    const std::vector<int> lens = {6, 3};
    const int max_blocks = 2, num_blocks = 5;
    std::vector<int32_t> tables = {3, 0, 4, -1};
    std::vector<int32_t> seq, pos;
    for (int s = 0; s < 2; ++s)
        for (int p = 0; p < lens[s]; ++p) seq.push_back(s), pos.push_back(p);
    const int T = static_cast<int>(seq.size());
    auto q = randomFloats(rng, T * heads * hd);
    auto k = randomFloats(rng, T * kv_heads * hd);
    auto v = randomFloats(rng, T * kv_heads * hd);
    std::vector<float> kc(num_blocks * block * kv_heads * hd, NAN), vc(kc.size(), NAN);
    PagedKvLayout layout{num_blocks, block, kv_heads, hd, tables.data(), max_blocks};
    kvCacheWriteCpu({layout, T, seq.data(), pos.data(), k.data(), v.data(), kc.data(), vc.data()});
    std::vector<float> out(T * heads * hd, NAN);
    const float scale = 1.0f / std::sqrt(float(hd));
    pagedAttentionCpu({layout, T, heads, scale, seq.data(), pos.data(), q.data(), kc.data(), vc.data(), out.data()});
    std::vector<double> ref(out.size());
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h) {
            const int kvh = h / (heads / kv_heads);
            std::vector<double> sc;
            std::vector<int> rows;
            for (int u = 0; u < T; ++u)
                if (seq[u] == seq[t] && pos[u] <= pos[t]) {
                    double d = 0;
                    for (int i = 0; i < hd; ++i)
                        d += double(q[(t * heads + h) * hd + i]) * k[(u * kv_heads + kvh) * hd + i];
                    sc.push_back(d * scale);
                    rows.push_back(u);
                }
            double mx = *std::max_element(sc.begin(), sc.end()), den = 0;
            for (auto& e : sc) den += (e = std::exp(e - mx));
            for (int i = 0; i < hd; ++i) {
                double acc = 0;
                for (size_t j = 0; j < rows.size(); ++j) acc += sc[j] / den * v[(rows[j] * kv_heads + kvh) * hd + i];
                ref[(t * heads + h) * hd + i] = acc;
            }
        }
    EXPECT_LT(relL2(out, ref), 1e-6);
}

TEST(PagedAttentionCpu, RejectsPositionOutsideBlockTable) {
    std::vector<int32_t> tables = {0};
    std::vector<float> kc(4 * 8), vc(4 * 8), q(8), out(8);
    std::vector<int32_t> seq = {0}, pos = {4};  // block index 1 does not exist
    PagedKvLayout layout{1, 4, 1, 8, tables.data(), 1};
    EXPECT_THROW(
        pagedAttentionCpu({layout, 1, 1, 1.0f, seq.data(), pos.data(), q.data(), kc.data(), vc.data(), out.data()}),
        core::Error);
}

TEST(EmbeddingCpu, LooksUpRowsAndChecksIds) {
    std::vector<core::Bf16> table = {core::Bf16(1.0f), core::Bf16(2.0f), core::Bf16(3.0f), core::Bf16(4.0f)};
    std::vector<int32_t> ids = {1, 0};
    std::vector<float> out(4);
    embeddingCpu({2, 2, 2, ids.data(), table.data(), out.data()});
    EXPECT_EQ(out, (std::vector<float>{3, 4, 1, 2}));
    ids = {2};
    EXPECT_THROW(embeddingCpu({1, 2, 2, ids.data(), table.data(), out.data()}), core::Error);
}

TEST(ArgmaxCpu, FirstMaximumWinsAndNanNever) {
    std::vector<float> v = {1, 3, 3, 2};
    EXPECT_EQ(argmaxCpu(v.data(), 4), 1);
    std::vector<float> n = {NAN, -5, 2};
    EXPECT_EQ(argmaxCpu(n.data(), 3), 2);
}

}  // namespace
}  // namespace afd::kernels
