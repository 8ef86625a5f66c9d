#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/router.h"
#include "model/model_config.h"

namespace afd::kernels {

RouterParams routerParams(const model::ModelConfig& config, int64_t num_tokens, ActDType act_dtype, const void* x,
                          const core::Bf16* gate_w, int32_t* topk_ids, float* topk_weights) {
    RouterParams p;
    p.num_tokens = num_tokens;
    p.hidden = config.hidden_size;
    p.num_experts = config.num_experts;
    p.top_k = config.num_experts_per_tok;
    p.norm_topk_prob = config.norm_topk_prob;
    p.act_dtype = act_dtype;
    p.x = x;
    p.gate_w = gate_w;
    p.topk_ids = topk_ids;
    p.topk_weights = topk_weights;
    return p;
}

void routerForwardCpu(const RouterParams& p) {
    AFD_CHECK(p.num_tokens >= 0 && p.hidden > 0 && p.num_experts > 0 && p.top_k > 0 && p.top_k <= p.num_experts,
              "bad router shape T={} H={} E={} K={}", p.num_tokens, p.hidden, p.num_experts, p.top_k);
    core::parallelFor(p.num_tokens, 8, [&](int64_t begin, int64_t end) {
        std::vector<float> x(static_cast<size_t>(p.hidden));
        std::vector<float> probs(static_cast<size_t>(p.num_experts));
        std::vector<int32_t> order(static_cast<size_t>(p.num_experts));
        for (int64_t t = begin; t < end; ++t) {
            if (p.act_dtype == ActDType::kF32) {
                const float* src = static_cast<const float*>(p.x) + t * p.hidden;
                std::copy(src, src + p.hidden, x.begin());
            } else {
                const core::Bf16* src = static_cast<const core::Bf16*>(p.x) + t * p.hidden;
                for (int64_t i = 0; i < p.hidden; ++i) x[static_cast<size_t>(i)] = src[i].toFloat();
            }
            float max_logit = -INFINITY;
            for (int64_t e = 0; e < p.num_experts; ++e) {
                const float logit = dotF32Bf16(x.data(), p.gate_w + e * p.hidden, p.hidden);
                if (p.logits != nullptr) p.logits[t * p.num_experts + e] = logit;
                probs[static_cast<size_t>(e)] = logit;
                max_logit = std::max(max_logit, logit);
            }
            float sum = 0.0f;
            for (float& v : probs) {
                v = std::exp(v - max_logit);
                sum += v;
            }
            for (float& v : probs) v /= sum;
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + p.top_k, order.end(), [&](int32_t a, int32_t b) {
                const float pa = probs[static_cast<size_t>(a)];
                const float pb = probs[static_cast<size_t>(b)];
                return pa > pb || (pa == pb && a < b);
            });
            float topk_sum = 0.0f;
            for (int64_t j = 0; j < p.top_k; ++j) topk_sum += probs[static_cast<size_t>(order[static_cast<size_t>(j)])];
            for (int64_t j = 0; j < p.top_k; ++j) {
                const int32_t e = order[static_cast<size_t>(j)];
                const float w = probs[static_cast<size_t>(e)];
                p.topk_ids[t * p.top_k + j] = e;
                p.topk_weights[t * p.top_k + j] = p.norm_topk_prob ? w / topk_sum : w;
            }
        }
    });
}

}  // namespace afd::kernels
