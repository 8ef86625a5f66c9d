// The attention-side engine: requests in, tokens out. Owns the KV cache, the scheduler and the model runner, all on
// the device of its DeviceOps (attention/device_ops_factory.h picks them); the MLP/MoE blocks run wherever its
// MlpBackend puts them (this process for the dense reference, FFN ranks for AFD). Sampling runs through the ops.
// Single-threaded: one thread (the engine thread) makes every call, except checkRequest(); EngineLoop
// (attention/engine_loop.h) puts it on a thread of its own with a thread-safe submit/abort queue.
//
// Failures: a step whose forward pass returns an error fails only the sequences of that step (they end with
// FinishReason::kError and the error; their blocks are freed); the engine keeps serving when the MLP backend says it
// can (MlpBackend::resetAfterFailedStep). When it cannot (AFD: the FFN peers are mid-step), every sequence fails and
// the engine is unhealthy for good: health() says why, addRequest refuses, steps do nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention/device_ops.h"
#include "attention/forward_batch.h"
#include "attention/kv_cache.h"
#include "attention/mlp_backend.h"
#include "attention/model_runner.h"
#include "attention/scheduler.h"
#include "attention/sequence.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention {

struct EngineOptions {
    SchedulerOptions scheduler;
    int64_t block_size = 16;
    int64_t num_kv_blocks = 0;  // 0: enough for max_num_seqs sequences of max_model_len, within kv_cache_bytes
    uint64_t kv_cache_bytes = 1ull << 30;  // budget for the automatic block count
    bool dual_batch_overlap = false;       // split every step into two stages
    int64_t dbo_min_tokens = 2;            // steps with fewer tokens leave the second stage empty
    // CUDA graphs for decode steps (on a device with graphs and a capturable MLP backend; dual-batch overlap steps
    // always run eagerly): every bucket of the ladder is captured at start, and a decode-only step replays the graph
    // of the smallest bucket that holds it.
    bool enforce_eager = false;  // no graphs: every step runs eagerly
    // The ladder's cap: decode steps of more rows run eagerly. 0: min(max_num_seqs, max_num_batched_tokens), which
    // also bounds any cap given.
    int64_t cuda_graph_max_batch_size = 0;
    // The buckets (ascending, each >= 1); empty: defaultGraphBatchSizes(cap) (graph_batches.h). Sizes above the cap
    // are left out.
    std::vector<int64_t> cuda_graph_batch_sizes;
    core::Status validate() const;
};

// A token sampled in a step: for streaming.
struct SampledToken {
    int64_t id = 0;  // the sequence's
    int32_t token = 0;
};

// What one step did.
struct StepOutput {
    // Every sequence that sampled a token in the step, in chunk order (a step samples at most one per sequence); a
    // sequence that finished in the step is here with its last token too.
    std::vector<SampledToken> tokens;
    // Sequences that ended in the step (ownership passes to the caller): stop or length; after a failed step, every
    // sequence of it (kError, with the step's error), and every other one too when the engine became unhealthy.
    std::vector<std::unique_ptr<Sequence>> finished;
    core::Status error;         // why the step failed (ok when it did not)
    int64_t num_tokens = 0;     // tokens the step computed (0: nothing was scheduled)
    int64_t num_sequences = 0;  // sequences it ran
};

class Engine {
public:
    // `weights` on ops' device; `ops` and `backend` outlive the engine. Every buffer (KV cache, workspaces, step
    // metadata) is allocated here, at the limits the options set: max_num_batched_tokens rows, max_num_seqs sequences;
    // the decode graphs are captured here too.
    Engine(const model::ModelConfig& config, const model::ModelWeights& weights, DeviceOps& ops, MlpBackend& backend,
           const EngineOptions& options);
    // As the constructor, with the options checked (errors name the option), and a KV cache that cannot be
    // allocated or a device that refuses the model (a kernel's limit, a failed graph capture) reported as an error
    // instead of an exception.
    static core::Result<std::unique_ptr<Engine>> create(const model::ModelConfig& config,
                                                        const model::ModelWeights& weights, DeviceOps& ops,
                                                        MlpBackend& backend, const EngineOptions& options);

    // Whether addRequest would take this request: sampling params in range, token ids in the vocabulary, prompt +
    // max_tokens within max_model_len and the KV cache. Errors (kInvalidArgument) name the field or limit.
    // Thread-safe: reads only what is fixed at construction.
    core::Status checkRequest(std::span<const int32_t> prompt, const SamplingParams& params) const;
    // Queues a request; returns its id. Errors as checkRequest (prefixed with the request id where the limit is the
    // engine's), or health() when the engine is unhealthy.
    core::Result<int64_t> addRequest(std::vector<int32_t> prompt, const SamplingParams& params,
                                     bool want_prompt_logits = false);
    bool hasWork() const { return scheduler_->hasWork(); }
    // Runs one step (nothing when nothing is scheduled) and reports it; a failure is in the output, not thrown.
    StepOutput runStep();
    // runStep for offline callers: the sequences that finished in it, or the step's error (its sequences are dropped).
    core::Result<std::vector<std::unique_ptr<Sequence>>> step();
    // Cancels the waiting or running request `id` and frees its blocks: returns it finished with kAborted, or nullptr
    // when no such request is waiting or running.
    std::unique_ptr<Sequence> abort(int64_t id);
    // Ends every waiting and running request with kError and `why` (a shutdown), freeing their blocks.
    std::vector<std::unique_ptr<Sequence>> failAll(const core::Status& why);
    // Ok, or why the engine cannot serve any more (the MLP backend could not recover from a failed step).
    const core::Status& health() const { return health_; }
    // Tells the backend that no step follows (AFD: this rank leaves its FFN peers). Idempotent. When the engine is
    // unhealthy the backend is mid-step, so nothing is sent (the caller closes the connection instead).
    core::Status finish();

    uint64_t numSteps() const { return next_step_; }
    // Steps that replayed a CUDA graph, and steps that ran eagerly (for tests and metrics).
    uint64_t numGraphReplays() const { return runner_->numGraphReplays(); }
    uint64_t numEagerSteps() const { return runner_->numEagerSteps(); }
    // The decode buckets captured at start (empty without graphs), and the device memory their graphs hold.
    const std::vector<int64_t>& graphBatchSizes() const { return runner_->graphBatchSizes(); }
    uint64_t graphMemoryBytes() const { return ops_.graphMemoryBytes(); }
    const Scheduler& scheduler() const { return *scheduler_; }
    const MlpBackend& backend() const { return backend_; }
    const KvCache& kvCache() const { return *kv_cache_; }

private:
    core::Status checkParamsAndIds(std::span<const int32_t> prompt, const SamplingParams& params) const;
    // Ends the sequences of a step whose forward pass failed with `error`, then asks the backend whether it can go on.
    void failStep(const ScheduledStep& scheduled, const core::Status& error, StepOutput& out);

    const model::ModelConfig& config_;
    EngineOptions options_;
    DeviceOps& ops_;
    MlpBackend& backend_;
    ForwardBatchOptions batch_options_;
    std::unique_ptr<KvCache> kv_cache_;
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<ModelRunner> runner_;
    int64_t next_request_id_ = 0;
    uint64_t next_step_ = 0;
    bool finished_ = false;
    core::Status health_;  // not ok once the backend could not recover from a failed step
    // Per-step scratch, reused.
    std::vector<SampleRequest> sample_requests_;
    std::vector<int32_t> sampled_;
};

}  // namespace afd::attention
