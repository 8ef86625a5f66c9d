// One forward pass of the decoder over a batch of token chunks (prefill chunks and decodes mixed), composed of
// DeviceOps on one device:
//   embedding → per layer [add + input norm → fused QKV projection → q/k norm, RoPE, KV write → paged attention →
//   o_proj → add + post norm → MLP/MoE through the MlpBackend] → add + final norm (only the rows that sample) → LM
//   head.
// The batch may be split into two stages (dual-batch overlap): stage s's attention runs while the backend works on
// the other stage's MLP; each stage uses its own rows of every workspace.
//
// Memory: every workspace and the step metadata buffers are allocated once, at the limits, on the ops' device; a
// step allocates no device memory and every op of a step with the same shape reads and writes the same addresses.
// Weights must be on the ops' device, their heads at the ops' storedHeadDim (hs below). Not thread-safe (the engine
// thread).
//
// CUDA graphs: on a device with graphs and a capturable backend, decode steps replay a graph of the whole run()
// (embedding to LM head logits) captured per padded batch size (graph_batches.h); sampling stays outside.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/device_ops.h"
#include "attention/forward_batch.h"
#include "attention/kv_cache.h"
#include "attention/mlp_backend.h"
#include "attention/step_buffers.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

class ModelRunner {
public:
    // limits.graph_batch_sizes: the decode buckets captureDecodeGraphs captures (empty: every step runs eagerly).
    ModelRunner(const model::ModelConfig& config, const model::ModelWeights& weights, DeviceOps& ops, KvCache& kv_cache,
                MlpBackend& backend, const StepLimits& limits);

    // Uploads the batch's metadata and enqueues the step on the ops' stream. Returns logits
    // [logits_rows.size(), vocab_size] FP32 on the ops' device: a view of the runner's logits buffer, valid until the
    // next forward (read it after the stream has passed the step: DeviceOps::sample and synchronize do).
    // `step` numbers the step for the backend; `last` tells it no step follows.
    // A decode-only batch (ForwardBatch::isDecodeOnly) that fits a captured bucket is padded to it and replays its
    // graph; every other batch runs eagerly (run(upload(batch))).
    core::Result<core::Tensor> forward(const ForwardBatch& batch, uint64_t step, bool last);

    // The two halves of an eager forward. upload enqueues the batch's metadata copies into the fixed step buffers; run
    // enqueues the step's ops over them. Batches of the same shape (tokens, stage rows, chunks per stage, logits rows)
    // give the same views, so a run captured in a CUDA graph (with a capturable backend) can be replayed after a
    // later upload of a batch of that shape.
    StepTensors upload(const ForwardBatch& batch) { return step_buffers_.upload(batch); }
    // `flags` (StepFlag bits) and `capturing` go to the backend's StepPlan.
    core::Result<core::Tensor> run(const StepTensors& tensors, uint64_t step, bool last, uint32_t flags = 0,
                                   bool capturing = false);

    // Captures, for each bucket of limits.graph_batch_sizes, a graph of run() over a batch of that many padding
    // decode rows (after one eager run of it, so that nothing is first done inside the capture). Needs
    // ops.supportsGraphs() and backend.capturable(). Call once, before the first forward, outside any capture. The
    // padding writes no KV and changes no state. Logs the graphs' count, time and device memory.
    core::Status captureDecodeGraphs();

    // Steps so far that replayed a graph, and that ran eagerly.
    uint64_t numGraphReplays() const { return graph_replays_; }
    uint64_t numEagerSteps() const { return eager_steps_; }
    // The buckets with a captured graph (ascending).
    const std::vector<int64_t>& graphBatchSizes() const { return graph_sizes_; }

private:
    // The attention block of layer `layer` on one stage's rows: from normed_ rows (the input norm's output) to the
    // post-attention norm's output in normed_ rows, the residual updated in hidden_.
    void attentionBlock(int64_t layer, const StepTensors& step, const StageTensors& stage);
    // The layer's input norm on a stage's rows: the previous layer's MLP output added first (none before layer 0).
    void inputNorm(int64_t layer, const StageTensors& stage);

    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    DeviceOps& ops_;
    KvCache& kv_cache_;
    MlpBackend& backend_;
    StepBuffers step_buffers_;
    StepLimits limits_;
    RopeTable rope_;
    std::vector<int64_t> graph_sizes_;  // buckets captured
    ForwardBatch padded_;               // the current decode batch padded to its bucket (reused)
    uint64_t graph_replays_ = 0;
    uint64_t eager_steps_ = 0;
    // Workspaces on the ops' device, rows [0, max_tokens) (final_normed_ and logits_: [0, max_chunks)).
    core::Tensor hidden_;        // [T, H] F32: the residual stream
    core::Tensor normed_;        // [T, H] activation dtype: a norm's output, the MLP's input
    core::Tensor qkv_;           // [T, (nh + 2 nkv) hs] F32
    core::Tensor q_;             // [T, nh hs] activation dtype: normed, rotated queries
    core::Tensor attn_;          // [T, nh hs] activation dtype: attention output
    core::Tensor proj_;          // [T, H] activation dtype: o_proj output (bias added with the residual)
    core::Tensor mlp_out_;       // [T, H] activation dtype: the MLP backend's output
    core::Tensor final_normed_;  // [R, H] activation dtype: the final norm of the rows that sample
    core::Tensor logits_;        // [R, V] F32
};

}  // namespace afd::attention
