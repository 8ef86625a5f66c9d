#include "ffn/cpu_ffn_compute.h"

#include "core/check.h"
#include "kernels/mlp_block.h"
#include "kernels/moe.h"

namespace afd::ffn {

CpuFfnCompute::CpuFfnCompute(const model::ModelConfig& config, model::ModelWeights weights)
    : config_(config), weights_(std::move(weights)), bytes_(weights_.owned_bytes + weights_.checkpoint_bytes) {}

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
    kernels::mlpBlockCpu(config_, weights_.mlp[static_cast<size_t>(layer)], x, num_tokens, out);
    return core::Status::ok();
}

void CpuFfnCompute::release() { weights_ = model::ModelWeights(); }

}  // namespace afd::ffn
