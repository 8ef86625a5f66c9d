#include "attention/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "attention/graph_batches.h"
#include "core/check.h"
#include "core/logging.h"
#include "kernels/rope.h"
#include "transport/frame.h"

namespace afd::attention {
namespace {

// Absent weights (biases when attention_bias is false) are default tensors with no data.
const core::Tensor* optional(const core::Tensor& t) { return t.rawData() == nullptr ? nullptr : &t; }

void expectWeight(const core::Tensor& t, const core::Shape& shape, const core::Device& device, const char* what,
                  int64_t layer) {
    AFD_CHECK(t.rawData() != nullptr && t.dtype() == core::DType::kBf16 && t.shape() == shape,
              "model runner: layer {} {} must be BF16 {}, got {} {}", layer, what, core::shapeToString(shape),
              core::dtypeName(t.dtype()), core::shapeToString(t.shape()));
    AFD_CHECK(t.device() == device, "model runner: layer {} {} is on {}, the ops on {}", layer, what,
              t.device().toString(), device.toString());
}

// The RoPE table for positions [0, max_positions), computed on the host and copied to the ops' device.
RopeTable makeRopeTable(DeviceOps& ops, int64_t max_positions, int64_t head_dim, double theta) {
    const int64_t half = head_dim / 2;
    std::vector<int32_t> positions(static_cast<size_t>(max_positions));
    std::iota(positions.begin(), positions.end(), 0);
    core::Tensor cos = core::Tensor::empty(core::DType::kF32, {max_positions, half});
    core::Tensor sin = core::Tensor::empty(core::DType::kF32, {max_positions, half});
    kernels::ropeTableCpu(positions.data(), max_positions, head_dim, theta, cos.data<float>(), sin.data<float>());
    RopeTable table{ops.empty(core::DType::kF32, {max_positions, half}),
                    ops.empty(core::DType::kF32, {max_positions, half})};
    ops.copy(cos, table.cos);
    ops.copy(sin, table.sin);
    ops.synchronize();  // the host tables die here
    return table;
}

}  // namespace

ModelRunner::ModelRunner(const model::ModelConfig& config, const model::ModelWeights& weights, DeviceOps& ops,
                         KvCache& kv_cache, MlpBackend& backend, const StepLimits& limits)
    : config_(config),
      weights_(weights),
      ops_(ops),
      kv_cache_(kv_cache),
      backend_(backend),
      step_buffers_(ops, limits),
      limits_(limits) {
    const int64_t H = config.hidden_size;
    // Heads as the device stores them (DeviceOps::storedHeadDim); RoPE and the softmax scale use the model's.
    const int64_t hd = ops.storedHeadDim(config.head_dim);
    const int64_t q_size = config.num_attention_heads * hd;
    const int64_t qkv_rows = q_size + 2 * config.num_key_value_heads * hd;
    const core::Device device = ops.device();
    AFD_CHECK(limits.max_positions > 0, "model runner: no positions");
    expectWeight(weights.embed, {config.vocab_size, H}, device, "embed_tokens", -1);
    expectWeight(weights.lm_head, {config.vocab_size, H}, device, "lm_head", -1);
    expectWeight(weights.final_norm, {H}, device, "final norm", -1);
    AFD_CHECK(static_cast<int64_t>(weights.attention.size()) == config.num_hidden_layers,
              "model runner: {} attention layers for {} layers", weights.attention.size(), config.num_hidden_layers);
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const auto& w = weights.attention[static_cast<size_t>(l)];
        expectWeight(w.input_norm, {H}, device, "input_layernorm", l);
        expectWeight(w.qkv_proj, {qkv_rows, H}, device, "fused qkv_proj", l);
        expectWeight(w.o_proj, {H, q_size}, device, "o_proj", l);
        expectWeight(w.q_norm, {hd}, device, "q_norm", l);
        expectWeight(w.k_norm, {hd}, device, "k_norm", l);
        expectWeight(w.post_norm, {H}, device, "post_attention_layernorm", l);
        if (config.attention_bias) {
            expectWeight(w.qkv_bias, {qkv_rows}, device, "fused qkv bias", l);
            expectWeight(w.o_bias, {H}, device, "o_proj bias", l);
        }
    }
    AFD_CHECK(std::is_sorted(limits.graph_batch_sizes.begin(), limits.graph_batch_sizes.end()) &&
                  (limits.graph_batch_sizes.empty() ||
                   (limits.graph_batch_sizes.front() >= 1 && limits.graph_batch_sizes.back() <= limits.max_chunks)),
              "model runner: graph batch sizes must ascend within [1, {}]", limits.max_chunks);
    ops.reserve(config, limits);
    backend.reserve(limits);
    rope_ = makeRopeTable(ops, limits.max_positions, config.head_dim, config.rope_theta);
    const core::DType act = ops.activationDType();
    const int64_t T = limits.max_tokens;
    const int64_t R = limits.max_chunks;
    hidden_ = ops.empty(core::DType::kF32, {T, H});
    normed_ = ops.empty(act, {T, H});
    // The projections that feed an FP32 op keep FP32 outputs: the q/k norms and RoPE read the QKV projection, the
    // residual add reads o_proj's (one rounding to bf16 fewer each, at a few bytes per token).
    qkv_ = ops.empty(core::DType::kF32, {T, qkv_rows});
    q_ = ops.empty(act, {T, q_size});
    attn_ = ops.empty(act, {T, q_size});
    proj_ = ops.empty(core::DType::kF32, {T, H});
    // The MLP's sums stay FP32 up to the residual add (MoeParams::out_f32): partial sums of several FFN ranks add up
    // as the dense engine's whole sum does.
    mlp_out_ = ops.empty(core::DType::kF32, {T, H});
    final_normed_ = ops.empty(act, {R, H});
    logits_ = ops.empty(core::DType::kF32, {R, config.vocab_size});
}

void ModelRunner::inputNorm(int64_t layer, const StageTensors& stage) {
    const auto& w = weights_.attention[static_cast<size_t>(layer)];
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const core::Tensor residual = hidden_.slice(stage.begin, stage.end);
    const core::Tensor out = normed_.slice(stage.begin, stage.end);
    if (layer == 0) {
        ops_.addRmsNorm(residual, nullptr, nullptr, w.input_norm, eps, out);
        return;
    }
    const core::Tensor mlp = mlp_out_.slice(stage.begin, stage.end);
    ops_.addRmsNorm(residual, &mlp, nullptr, w.input_norm, eps, out);
}

void ModelRunner::attentionBlock(int64_t layer, const StepTensors& step, const StageTensors& stage) {
    const auto& w = weights_.attention[static_cast<size_t>(layer)];
    const int64_t b = stage.begin;
    const int64_t e = stage.end;
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const core::Tensor x = normed_.slice(b, e);
    const core::Tensor qkv = qkv_.slice(b, e);
    const core::Tensor q = q_.slice(b, e);
    const core::Tensor attn = attn_.slice(b, e);
    const core::Tensor proj = proj_.slice(b, e);
    const core::Tensor& k_cache = kv_cache_.keys(layer);
    const core::Tensor& v_cache = kv_cache_.values(layer);

    ops_.linear(x, w.qkv_proj, nullptr, qkv);
    ops_.qkvRopeKvWrite(qkv, optional(w.qkv_bias), w.q_norm, w.k_norm, eps, rope_, step.positions.slice(b, e),
                        step.slot_mapping.slice(b, e), k_cache, v_cache, q);
    const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
    ops_.attention(q, k_cache, v_cache, stage.chunks, scale, attn);
    ops_.linear(attn, w.o_proj, nullptr, proj);
    ops_.addRmsNorm(hidden_.slice(b, e), &proj, optional(w.o_bias), w.post_norm, eps, x);
}

core::Result<core::Tensor> ModelRunner::forward(const ForwardBatch& batch, uint64_t step, bool last) {
    if (!graph_sizes_.empty() && !last && batch.num_padding == 0 && batch.isDecodeOnly()) {
        if (const auto bucket = graphBucketFor(graph_sizes_, batch.numTokens())) {
            padded_ = batch;
            padDecodeBatch(padded_, *bucket);
            const StepTensors st = upload(padded_);
            StepPlan plan;
            plan.step = step;
            plan.stage_tokens = {*bucket};
            plan.num_valid_tokens = st.num_valid;
            AFD_RETURN_IF_ERROR(backend_.beforeReplay(plan));
            ops_.replayGraph(*bucket);
            ++graph_replays_;
            return logits_.slice(0, batch.numTokens());
        }
    }
    ++eager_steps_;
    return run(upload(batch), step, last);
}

core::Status ModelRunner::captureDecodeGraphs() {
    AFD_CHECK(graph_sizes_.empty() && graph_replays_ == 0 && eager_steps_ == 0,
              "model runner: decode graphs are captured once, before the first step");
    if (limits_.graph_batch_sizes.empty()) return core::Status::ok();
    if (!ops_.supportsGraphs()) return core::unsupported("{} has no graphs", ops_.device().toString());
    if (!backend_.capturable()) return core::unsupported("the MLP backend cannot be captured in a graph");
    const auto start = std::chrono::steady_clock::now();
    const uint64_t bytes_before = ops_.graphMemoryBytes();
    // The captured attention keeps this bound on every replay's sequence lengths.
    const auto max_seq_len = static_cast<int32_t>(limits_.max_positions);
    for (const int64_t rows : limits_.graph_batch_sizes) {
        const ForwardBatch dummy = paddingDecodeBatch(rows, limits_.block_table_width, max_seq_len);
        const StepTensors tensors = upload(dummy);
        // NOTE: an eager run first, so that one-time work (module loading, library setup) happens outside the capture.
        // A remote backend's peers serve it as a step of this shape that will be replayed (they may capture theirs).
        AFD_RETURN_IF_ERROR(run(tensors, 0, false, transport::kStepWarmup | transport::kStepCapture).status());
        ops_.synchronize();  // the next upload rewrites the host staging this one's copies read
        AFD_RETURN_IF_ERROR(backend_.checkStepCompleted());
        AFD_RETURN_IF_ERROR(
            ops_.captureGraph(rows, [&] { return run(tensors, 0, false, 0, /*capturing=*/true).status(); }));
    }
    ops_.synchronize();
    graph_sizes_ = limits_.graph_batch_sizes;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    AFD_LOG_INFO("{}: captured {} decode graphs (batch sizes {} ... {}) in {:.2f} s, {:.1f} MiB of device memory",
                 ops_.device().toString(), graph_sizes_.size(), graph_sizes_.front(), graph_sizes_.back(), seconds,
                 static_cast<double>(ops_.graphMemoryBytes() - bytes_before) / (1 << 20));
    return core::Status::ok();
}

core::Result<core::Tensor> ModelRunner::run(const StepTensors& st, uint64_t step, bool last, uint32_t flags,
                                            bool capturing) {
    const int64_t T = st.tokens.numel();
    ops_.embedding(st.tokens, weights_.embed, hidden_.slice(0, T));

    StepPlan plan;
    plan.step = step;
    plan.last = last;
    plan.flags = flags;
    plan.capturing = capturing;
    for (const auto& stage : st.stages) plan.stage_tokens.push_back(stage.end - stage.begin);
    if (st.padded) {
        AFD_CHECK(st.stages.size() == 1, "model runner: a padded step has one stage, got {}", st.stages.size());
        plan.num_valid_tokens = st.num_valid;
    }
    AFD_RETURN_IF_ERROR(backend_.beginStep(plan));

    // Dual-batch order: for each layer and stage, finish the stage's previous MLP, then run its attention and
    // submit its MLP, so one stage's attention overlaps the other stage's MLP.
    const int64_t L = config_.num_hidden_layers;
    for (int64_t layer = 0; layer < L; ++layer) {
        for (size_t s = 0; s < st.stages.size(); ++s) {
            const StageTensors& stage = st.stages[s];
            if (layer > 0) AFD_RETURN_IF_ERROR(backend_.collect(layer - 1, static_cast<int>(s)));
            // NOTE: an empty stage (a DBO step too small to split) runs no ops but still crosses to the backend.
            if (stage.end > stage.begin) {
                inputNorm(layer, stage);
                attentionBlock(layer, st, stage);
            }
            AFD_RETURN_IF_ERROR(backend_.submit(layer, static_cast<int>(s), normed_.slice(stage.begin, stage.end),
                                                mlp_out_.slice(stage.begin, stage.end)));
        }
    }
    const float eps = static_cast<float>(config_.rms_norm_eps);
    for (size_t s = 0; s < st.stages.size(); ++s) {
        const StageTensors& stage = st.stages[s];
        if (L == 0) continue;
        AFD_RETURN_IF_ERROR(backend_.collect(L - 1, static_cast<int>(s)));
        // The last residual add, as the op between blocks does it; its normed rows are not used (rmsNormRows below
        // normalises the rows that sample again), which keeps the add in the one op that every device has.
        if (stage.end > stage.begin) {
            const core::Tensor mlp = mlp_out_.slice(stage.begin, stage.end);
            ops_.addRmsNorm(hidden_.slice(stage.begin, stage.end), &mlp, nullptr, weights_.final_norm, eps,
                            normed_.slice(stage.begin, stage.end));
        }
    }
    AFD_RETURN_IF_ERROR(backend_.endStep());

    const int64_t R = st.logits_rows.numel();
    const core::Tensor logits = logits_.slice(0, R);
    if (R > 0) {
        const core::Tensor normed = final_normed_.slice(0, R);
        ops_.rmsNormRows(hidden_.slice(0, T), st.logits_rows, weights_.final_norm, eps, normed);
        ops_.linear(normed, weights_.lm_head, nullptr, logits);
    }
    return logits;
}

}  // namespace afd::attention
