#include "attention/model_runner.h"

#include <cmath>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace afd::attention {
namespace {

// Weights that are absent (e.g. biases when attention_bias is false) are default tensors with no data.
const core::Bf16* bf16(const core::Tensor& t) { return t.rawData() == nullptr ? nullptr : t.data<core::Bf16>(); }

void linear(int64_t rows, int64_t in, int64_t out, const float* x, const core::Tensor& w, const core::Tensor& bias,
            float* y) {
    kernels::linearCpu({rows, in, out, x, bf16(w), bf16(bias), y});
}

}  // namespace

ModelRunner::ModelRunner(const model::ModelConfig& config, const model::ModelWeights& weights, KvCache& kv_cache,
                         MlpBackend& backend)
    : config_(config), weights_(weights), kv_cache_(kv_cache), backend_(backend) {}

void ModelRunner::attentionBlock(int64_t layer, const ForwardBatch& b, int64_t begin, int64_t end) {
    const auto& w = weights_.attention[static_cast<size_t>(layer)];
    const int64_t n = end - begin;
    if (n == 0) return;
    const int64_t H = config_.hidden_size;
    const int64_t hd = config_.head_dim;
    const int64_t nh = config_.num_attention_heads;
    const int64_t nkv = config_.num_key_value_heads;
    const float eps = static_cast<float>(config_.rms_norm_eps);
    float* h = hidden_.data() + begin * H;
    float* x = normed_.data() + begin * H;
    float* q = q_.data() + begin * nh * hd;
    float* k = k_.data() + begin * nkv * hd;
    float* v = v_.data() + begin * nkv * hd;
    float* attn = attn_.data() + begin * nh * hd;
    float* proj = proj_.data() + begin * H;

    kernels::rmsNormCpu({n, H, eps, h, bf16(w.input_norm), x});
    linear(n, H, nh * hd, x, w.q_proj, w.q_bias, q);
    linear(n, H, nkv * hd, x, w.k_proj, w.k_bias, k);
    linear(n, H, nkv * hd, x, w.v_proj, w.v_bias, v);
    kernels::rmsNormCpu({n * nh, hd, eps, q, bf16(w.q_norm), q});
    kernels::rmsNormCpu({n * nkv, hd, eps, k, bf16(w.k_norm), k});
    const float* cos = cos_.data() + begin * hd / 2;
    const float* sin = sin_.data() + begin * hd / 2;
    kernels::applyRopeCpu({n, nh, hd, cos, sin, q});
    kernels::applyRopeCpu({n, nkv, hd, cos, sin, k});

    const auto layout = kv_cache_.layout(b.block_tables.data(), b.max_blocks_per_seq);
    kernels::KvCacheWriteParams write;
    write.layout = layout;
    write.num_tokens = n;
    write.token_seq = b.token_seq.data() + begin;
    write.token_pos = b.positions.data() + begin;
    write.k = k;
    write.v = v;
    write.k_cache = kv_cache_.keys(layer);
    write.v_cache = kv_cache_.values(layer);
    kernels::kvCacheWriteCpu(write);
    kernels::PagedAttentionParams ap;
    ap.layout = layout;
    ap.num_tokens = n;
    ap.num_heads = nh;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ap.token_seq = write.token_seq;
    ap.token_pos = write.token_pos;
    ap.q = q;
    ap.k_cache = write.k_cache;
    ap.v_cache = write.v_cache;
    ap.out = attn;
    kernels::pagedAttentionCpu(ap);
    linear(n, nh * hd, H, attn, w.o_proj, w.o_bias, proj);
    for (int64_t i = 0; i < n * H; ++i) h[i] += proj[i];
    kernels::rmsNormCpu({n, H, eps, h, bf16(w.post_norm), x});
}

core::Result<core::Tensor> ModelRunner::forward(const ForwardBatch& b, uint64_t step, bool last) {
    const int64_t T = b.numTokens();
    const int64_t H = config_.hidden_size;
    const int64_t hd = config_.head_dim;
    AFD_CHECK(!b.stage_starts.empty() && b.stage_starts[0] == 0 && b.stage_starts.size() <= 2,
              "stage starts must be {{0}} or {{0, T0}}");
    AFD_CHECK(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.token_seq.size()) == T,
              "batch arrays disagree on the token count");
    auto grow = [](std::vector<float>& buf, int64_t n) {
        if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
    };
    grow(hidden_, T * H);
    grow(normed_, T * H);
    grow(proj_, T * H);
    grow(mlp_out_, T * H);
    grow(q_, T * config_.qSize());
    grow(k_, T * config_.kvSize());
    grow(v_, T * config_.kvSize());
    grow(attn_, T * config_.qSize());
    grow(cos_, T * hd / 2);
    grow(sin_, T * hd / 2);

    kernels::embeddingCpu({T, config_.vocab_size, H, b.tokens.data(), bf16(weights_.embed), hidden_.data()});
    kernels::ropeTableCpu(b.positions.data(), T, hd, config_.rope_theta, cos_.data(), sin_.data());

    const int num_stages = static_cast<int>(b.stage_starts.size());
    auto stageBegin = [&](int s) { return b.stage_starts[static_cast<size_t>(s)]; };
    auto stageEnd = [&](int s) { return s + 1 < num_stages ? b.stage_starts[static_cast<size_t>(s + 1)] : T; };
    StepPlan plan;
    plan.step = step;
    plan.last = last;
    for (int s = 0; s < num_stages; ++s) plan.stage_tokens.push_back(stageEnd(s) - stageBegin(s));
    AFD_RETURN_IF_ERROR(backend_.beginStep(plan));

    // Dual-batch order: for each layer and stage, finish the stage's previous MLP, then run its attention and
    // submit its MLP, so one stage's attention overlaps the other stage's MLP.
    auto collectInto = [&](int64_t layer, int s) -> core::Status {
        AFD_RETURN_IF_ERROR(backend_.collect(layer, s));
        for (int64_t i = stageBegin(s) * H; i < stageEnd(s) * H; ++i)
            hidden_[static_cast<size_t>(i)] += mlp_out_[static_cast<size_t>(i)];
        return core::Status::ok();
    };
    for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
        for (int s = 0; s < num_stages; ++s) {
            if (layer > 0) AFD_RETURN_IF_ERROR(collectInto(layer - 1, s));
            attentionBlock(layer, b, stageBegin(s), stageEnd(s));
            AFD_RETURN_IF_ERROR(backend_.submit(layer, s, normed_.data() + stageBegin(s) * H,
                                                stageEnd(s) - stageBegin(s), mlp_out_.data() + stageBegin(s) * H));
        }
    }
    for (int s = 0; s < num_stages; ++s) AFD_RETURN_IF_ERROR(collectInto(config_.num_hidden_layers - 1, s));
    AFD_RETURN_IF_ERROR(backend_.endStep());

    const int64_t R = static_cast<int64_t>(b.logits_rows.size());
    std::vector<float> final_rows(static_cast<size_t>(R * H));
    for (int64_t r = 0; r < R; ++r) {
        const int64_t t = b.logits_rows[static_cast<size_t>(r)];
        AFD_CHECK(t >= 0 && t < T, "logits row {} outside the batch of {}", t, T);
        std::copy(hidden_.begin() + t * H, hidden_.begin() + (t + 1) * H, final_rows.begin() + r * H);
    }
    kernels::rmsNormCpu({R, H, static_cast<float>(config_.rms_norm_eps), final_rows.data(), bf16(weights_.final_norm),
                         final_rows.data()});
    core::Tensor logits = core::Tensor::empty(core::DType::kF32, {R, config_.vocab_size});
    if (R > 0)
        linear(R, H, config_.vocab_size, final_rows.data(), weights_.lm_head, core::Tensor(), logits.data<float>());
    return logits;
}

}  // namespace afd::attention
