#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/moe.h"

namespace afd::kernels {
namespace {

// Tokens are processed in windows so the per-(token, slot) expert outputs stay bounded in memory.
constexpr int64_t kTokenWindow = 256;
// Tokens of one expert handled together, so the expert's weights are read from cache for all of them.
constexpr int64_t kTokensPerItem = 16;

float silu(float v) { return v / (1.0f + std::exp(-v)); }

void loadRow(const MoeParams& p, int64_t t, float* dst) {
    if (p.act_dtype == ActDType::kF32) {
        const float* src = static_cast<const float*>(p.x) + t * p.hidden;
        std::copy(src, src + p.hidden, dst);
    } else {
        const core::Bf16* src = static_cast<const core::Bf16*>(p.x) + t * p.hidden;
        for (int64_t i = 0; i < p.hidden; ++i) dst[i] = src[i].toFloat();
    }
}

struct WorkItem {
    int32_t expert;
    int64_t begin;  // range in the expert-sorted entry list
    int64_t end;
};

}  // namespace

void moeForwardCpu(const MoeParams& p) {
    AFD_CHECK(p.num_tokens >= 0 && p.hidden > 0 && p.inter > 0 && p.num_experts > 0 && p.top_k > 0,
              "bad MoE shape T={} H={} I={} E={} K={}", p.num_tokens, p.hidden, p.inter, p.num_experts, p.top_k);
    const int64_t H = p.hidden;
    const int64_t I = p.inter;
    const int64_t K = p.top_k;
    for (int64_t i = 0; i < p.num_tokens * K; ++i) {
        AFD_CHECK(p.topk_ids[i] >= -1 && p.topk_ids[i] < p.num_experts, "expert id {} at entry {} outside [-1, {})",
                  p.topk_ids[i], i, p.num_experts);
    }
    std::vector<float> expert_out;  // [window * K, H]: expert output of each (token, slot) entry
    std::vector<int64_t> entries;   // entry indices (t_local * K + slot), sorted by expert
    std::vector<int64_t> expert_begin(static_cast<size_t>(p.num_experts + 1));
    std::vector<WorkItem> items;

    for (int64_t w0 = 0; w0 < p.num_tokens; w0 += kTokenWindow) {
        const int64_t window = std::min(kTokenWindow, p.num_tokens - w0);
        const int32_t* ids = p.topk_ids + w0 * K;
        // Counting sort of the window's entries by expert.
        std::fill(expert_begin.begin(), expert_begin.end(), 0);
        for (int64_t i = 0; i < window * K; ++i) {
            if (ids[i] >= 0) ++expert_begin[static_cast<size_t>(ids[i] + 1)];
        }
        for (int64_t e = 0; e < p.num_experts; ++e) {
            expert_begin[static_cast<size_t>(e + 1)] += expert_begin[static_cast<size_t>(e)];
        }
        entries.assign(static_cast<size_t>(expert_begin.back()), 0);
        std::vector<int64_t> fill(expert_begin.begin(), expert_begin.end() - 1);
        for (int64_t i = 0; i < window * K; ++i) {
            if (ids[i] >= 0) entries[static_cast<size_t>(fill[static_cast<size_t>(ids[i])]++)] = i;
        }
        items.clear();
        for (int32_t e = 0; e < p.num_experts; ++e) {
            for (int64_t b = expert_begin[static_cast<size_t>(e)]; b < expert_begin[static_cast<size_t>(e + 1)];
                 b += kTokensPerItem) {
                items.push_back({e, b, std::min(b + kTokensPerItem, expert_begin[static_cast<size_t>(e + 1)])});
            }
        }
        expert_out.resize(static_cast<size_t>(window * K * H));
        core::parallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t ib, int64_t ie) {
            std::vector<float> x(static_cast<size_t>(H));
            std::vector<float> h(static_cast<size_t>(I));
            for (int64_t it = ib; it < ie; ++it) {
                const WorkItem& item = items[static_cast<size_t>(it)];
                const core::Bf16* w13 = p.w13 + static_cast<int64_t>(item.expert) * 2 * I * H;
                const core::Bf16* w2 = p.w2 + static_cast<int64_t>(item.expert) * H * I;
                for (int64_t n = item.begin; n < item.end; ++n) {
                    const int64_t entry = entries[static_cast<size_t>(n)];
                    loadRow(p, w0 + entry / K, x.data());
                    for (int64_t i = 0; i < I; ++i) {
                        const float gate = dotF32Bf16(x.data(), w13 + i * H, H);
                        const float up = dotF32Bf16(x.data(), w13 + (I + i) * H, H);
                        h[static_cast<size_t>(i)] = silu(gate) * up;
                        if (p.bf16_intermediates)
                            h[static_cast<size_t>(i)] = core::roundToBf16(h[static_cast<size_t>(i)]);
                    }
                    float* y = expert_out.data() + entry * H;
                    for (int64_t o = 0; o < H; ++o) y[o] = dotF32Bf16(h.data(), w2 + o * I, I);
                    if (p.bf16_intermediates) {
                        for (int64_t o = 0; o < H; ++o) y[o] = core::roundToBf16(y[o]);
                    }
                }
            }
        });
        // Combine: each token adds its entries in ascending expert id order (a fixed order per token).
        core::parallelFor(window, 16, [&](int64_t tb, int64_t te) {
            std::vector<float> acc(static_cast<size_t>(H));
            std::vector<int64_t> slots(static_cast<size_t>(K));
            for (int64_t t = tb; t < te; ++t) {
                std::fill(acc.begin(), acc.end(), 0.0f);
                int64_t num_slots = 0;
                for (int64_t j = 0; j < K; ++j) {
                    if (ids[t * K + j] >= 0) slots[static_cast<size_t>(num_slots++)] = j;
                }
                std::sort(slots.begin(), slots.begin() + num_slots,
                          [&](int64_t a, int64_t b) { return ids[t * K + a] < ids[t * K + b]; });
                for (int64_t s = 0; s < num_slots; ++s) {
                    const int64_t j = slots[static_cast<size_t>(s)];
                    const float weight = p.topk_weights[(w0 + t) * K + j];
                    const float* y = expert_out.data() + (t * K + j) * H;
                    for (int64_t o = 0; o < H; ++o) acc[static_cast<size_t>(o)] += weight * y[o];
                }
                if (p.act_dtype == ActDType::kF32 || p.out_f32) {
                    float* out = static_cast<float*>(p.out) + (w0 + t) * H;
                    std::copy(acc.begin(), acc.end(), out);
                } else {
                    core::Bf16* out = static_cast<core::Bf16*>(p.out) + (w0 + t) * H;
                    for (int64_t o = 0; o < H; ++o) out[o] = core::Bf16(acc[static_cast<size_t>(o)]);
                }
            }
        });
    }
}

}  // namespace afd::kernels
