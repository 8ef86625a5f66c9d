#include "ffn/cpu_ffn_compute.h"

#include "core/check.h"
#include "kernels/mlp_block.h"
#include "kernels/moe.h"
#include "kernels/router.h"

namespace afd::ffn {

CpuFfnCompute::CpuFfnCompute(const model::ModelConfig& config, model::ModelWeights weights)
    : config_(config),
      weights_(std::move(weights)),
      bytes_(weights_.owned_bytes + weights_.checkpoint_bytes),
      tally_(static_cast<size_t>(config.num_experts), 0),
      routed_tokens_(std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(config.num_experts))) {}

core::Status CpuFfnCompute::moePartial(int64_t layer, int64_t num_tokens, const float* x, const int32_t* ids,
                                       const float* weights, float* out) {
    const model::MlpLayerWeights& w = weights_.mlp[static_cast<size_t>(layer)];
    AFD_CHECK(w.is_moe && w.hasExperts(), "layer {} holds no experts on this rank", layer);
    kernels::MoeParams p;
    p.num_tokens = num_tokens;
    p.hidden = config_.hidden_size;
    p.inter = w.inter;
    p.num_experts = w.expert_end - w.expert_begin;
    p.top_k = config_.num_experts_per_tok;
    p.x = x;
    p.topk_ids = ids;
    p.topk_weights = weights;
    p.w13 = w.w13.data<core::Bf16>();
    p.w2 = w.w2.data<core::Bf16>();
    p.out = out;
    kernels::moeForwardCpu(p);
    return core::Status::ok();
}

core::Status CpuFfnCompute::mlpBlock(int64_t layer, int64_t num_tokens, const float* x, float* out) {
    const model::MlpLayerWeights& w = weights_.mlp[static_cast<size_t>(layer)];
    if (!w.is_moe) {
        kernels::mlpBlockCpu(config_, w, x, num_tokens, out);
        return core::Status::ok();
    }
    // The MoE block routed here (as mlpBlockCpu does), keeping the ids to count the tokens per expert.
    AFD_CHECK(w.router.rawData() != nullptr, "MoE layer {} without router weights", layer);
    AFD_CHECK(w.expert_end - w.expert_begin == config_.num_experts,
              "the whole MoE block needs all {} experts, holds {}", config_.num_experts, w.expert_end - w.expert_begin);
    const int64_t K = config_.num_experts_per_tok;
    ids_.resize(static_cast<size_t>(num_tokens * K));
    weights_scratch_.resize(ids_.size());
    kernels::routerForwardCpu(kernels::routerParams(config_, num_tokens, kernels::ActDType::kF32, x,
                                                    w.router.data<core::Bf16>(), ids_.data(), weights_scratch_.data()));
    for (const int32_t e : ids_) {
        if (e >= 0 && e < config_.num_experts) ++tally_[static_cast<size_t>(e)];
    }
    for (size_t e = 0; e < tally_.size(); ++e) {
        if (tally_[e] == 0) continue;
        routed_tokens_[e].fetch_add(tally_[e], std::memory_order_relaxed);
        tally_[e] = 0;
    }
    return moePartial(layer, num_tokens, x, ids_.data(), weights_scratch_.data(), out);
}

bool CpuFfnCompute::routedTokenTotals(std::span<uint64_t> totals) const {
    AFD_CHECK(totals.size() == static_cast<size_t>(config_.num_experts), "{} totals for {} experts", totals.size(),
              config_.num_experts);
    for (size_t e = 0; e < totals.size(); ++e) totals[e] = routed_tokens_[e].load(std::memory_order_relaxed);
    return true;
}

void CpuFfnCompute::release() { weights_ = model::ModelWeights(); }

}  // namespace afd::ffn
