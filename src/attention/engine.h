// The attention-side engine: requests in, tokens out. Owns the KV cache, the scheduler and the model runner;
// the MLP/MoE blocks run wherever its MlpBackend puts them (this process for the dense reference, FFN ranks
// for AFD). Single-threaded: one caller drives step().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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
    core::Status validate() const;
};

class Engine {
public:
    Engine(const model::ModelConfig& config, const model::ModelWeights& weights, MlpBackend& backend,
           const EngineOptions& options);
    // As the constructor, with the options checked (errors name the option) and a KV cache that cannot be
    // allocated reported as an error instead of an exception.
    static core::Result<std::unique_ptr<Engine>> create(const model::ModelConfig& config,
                                                        const model::ModelWeights& weights, MlpBackend& backend,
                                                        const EngineOptions& options);

    // Queues a request; returns its id. Errors (bad sampling params, too long) name the field.
    core::Result<int64_t> addRequest(std::vector<int32_t> prompt, const SamplingParams& params,
                                     bool want_prompt_logits = false);
    bool hasWork() const { return scheduler_->hasWork(); }
    // Runs one step. Returns the sequences that finished in it (ownership passes to the caller).
    core::Result<std::vector<std::unique_ptr<Sequence>>> step();
    // Tells the backend that no step follows (AFD: this rank leaves its FFN peers). Idempotent. After a step that
    // failed part-way the backend is mid-step, so nothing is sent (the caller closes the connection instead).
    core::Status finish();

    uint64_t numSteps() const { return next_step_; }
    const Scheduler& scheduler() const { return *scheduler_; }
    const MlpBackend& backend() const { return backend_; }

private:
    ForwardBatch buildBatch(const ScheduledStep& step) const;

    const model::ModelConfig& config_;
    EngineOptions options_;
    MlpBackend& backend_;
    std::unique_ptr<KvCache> kv_cache_;
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<ModelRunner> runner_;
    int64_t next_request_id_ = 0;
    uint64_t next_step_ = 0;
    bool finished_ = false;
    bool broken_ = false;  // a step failed part-way
};

}  // namespace afd::attention
