#include <vector>

#include "core/check.h"
#include "kernels/mlp_block.h"
#include "kernels/moe.h"
#include "kernels/router.h"

namespace afd::kernels {

void mlpBlockCpu(const model::ModelConfig& config, const model::MlpLayerWeights& w, const float* x, int64_t num_tokens,
                 float* out, bool bf16_intermediates) {
    const int64_t H = config.hidden_size;
    MoeParams moe;
    moe.num_tokens = num_tokens;
    moe.hidden = H;
    moe.inter = w.inter;
    moe.num_experts = w.expert_end - w.expert_begin;
    moe.x = x;
    moe.w13 = w.w13.data<core::Bf16>();
    moe.w2 = w.w2.data<core::Bf16>();
    moe.out = out;
    moe.bf16_intermediates = bf16_intermediates;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    if (w.is_moe) {
        AFD_CHECK(w.router.rawData() != nullptr, "MoE layer without router weights");
        AFD_CHECK(moe.num_experts == config.num_experts, "the whole MoE block needs all {} experts, holds {}",
                  config.num_experts, moe.num_experts);
        const int64_t K = config.num_experts_per_tok;
        ids.resize(static_cast<size_t>(num_tokens * K));
        weights.resize(ids.size());
        routerForwardCpu(routerParams(config, num_tokens, ActDType::kF32, x, w.router.data<core::Bf16>(), ids.data(),
                                      weights.data()));
        moe.top_k = K;
    } else {
        AFD_CHECK(w.w13.rawData() != nullptr, "dense MLP layer without weights");
        ids.assign(static_cast<size_t>(num_tokens), 0);
        weights.assign(static_cast<size_t>(num_tokens), 1.0f);
        moe.top_k = 1;
    }
    moe.topk_ids = ids.data();
    moe.topk_weights = weights.data();
    moeForwardCpu(moe);
}

}  // namespace afd::kernels
