#include "attention/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <new>

#include "attention/graph_batches.h"
#include "core/check.h"

namespace afd::attention {
namespace {

// The decode buckets of an engine with these options and limits: none when graphs are off or cannot be used.
std::vector<int64_t> decodeGraphSizes(const EngineOptions& options, const DeviceOps& ops, const MlpBackend& backend,
                                      int64_t max_chunks) {
    if (options.enforce_eager || options.dual_batch_overlap || !ops.supportsGraphs() || !backend.capturable()) {
        return {};
    }
    int64_t cap = max_chunks;
    if (options.cuda_graph_max_batch_size > 0) cap = std::min(cap, options.cuda_graph_max_batch_size);
    std::vector<int64_t> sizes =
        options.cuda_graph_batch_sizes.empty() ? defaultGraphBatchSizes(cap) : options.cuda_graph_batch_sizes;
    std::erase_if(sizes, [cap](int64_t b) { return b > cap; });
    return sizes;
}

void markFailed(Sequence& seq, const core::Status& error) {
    seq.status = SequenceStatus::kFinished;
    seq.finish_reason = FinishReason::kError;
    seq.error = error;
}

}  // namespace

core::Status EngineOptions::validate() const {
    AFD_RETURN_IF_ERROR(scheduler.validate());
    if (block_size < 1 || block_size > 4096) {
        return core::invalidArgument("block_size must be in [1, 4096], got {}", block_size);
    }
    if (num_kv_blocks < 0 || num_kv_blocks > std::numeric_limits<int32_t>::max()) {
        return core::invalidArgument("num_kv_blocks must be in [0, {}], got {}", std::numeric_limits<int32_t>::max(),
                                     num_kv_blocks);
    }
    if (dbo_min_tokens < 2) return core::invalidArgument("dbo_min_tokens must be >= 2, got {}", dbo_min_tokens);
    if (cuda_graph_max_batch_size < 0) {
        return core::invalidArgument("cuda_graph_max_batch_size must be >= 0, got {}", cuda_graph_max_batch_size);
    }
    for (size_t i = 0; i < cuda_graph_batch_sizes.size(); ++i) {
        if (cuda_graph_batch_sizes[i] < 1 || (i > 0 && cuda_graph_batch_sizes[i] <= cuda_graph_batch_sizes[i - 1])) {
            return core::invalidArgument("cuda_graph_batch_sizes must be ascending sizes >= 1, got {} at index {}",
                                         cuda_graph_batch_sizes[i], i);
        }
    }
    return core::Status::ok();
}

Engine::Engine(const model::ModelConfig& config, const model::ModelWeights& weights, DeviceOps& ops,
               MlpBackend& backend, const EngineOptions& options)
    : config_(config), options_(options), ops_(ops), backend_(backend) {
    AFD_CHECK_OK(options.validate());
    KvCacheShape shape;
    shape.num_layers = config.num_hidden_layers;
    shape.block_size = options.block_size;
    shape.num_kv_heads = config.num_key_value_heads;
    shape.head_dim = ops.storedHeadDim(config.head_dim);
    shape.dtype = ops.activationDType();
    const int64_t blocks_per_seq = (options.scheduler.max_model_len + options.block_size - 1) / options.block_size;
    // NOTE: validate() bounds max_model_len and max_num_seqs, so this product stays far from overflow.
    if (options.num_kv_blocks > 0) {
        shape.num_blocks = options.num_kv_blocks;
    } else {
        shape.num_blocks = 1;
        const uint64_t bytes_per_block = shape.bytes();
        const int64_t affordable = static_cast<int64_t>(options.kv_cache_bytes / bytes_per_block);
        shape.num_blocks = std::min<int64_t>(
            std::numeric_limits<int32_t>::max(),
            std::max<int64_t>(blocks_per_seq, std::min(blocks_per_seq * options.scheduler.max_num_seqs, affordable)));
    }
    kv_cache_ = std::make_unique<KvCache>(shape, ops);
    scheduler_ = std::make_unique<Scheduler>(options.scheduler, kv_cache_->allocator(), options.block_size);
    // A sequence holds at most the blocks of max_model_len positions, and never more than the cache has (the
    // scheduler refuses longer requests); every step fits the token budget and the sequence budget.
    StepLimits limits;
    limits.max_tokens = options.scheduler.max_num_batched_tokens;
    limits.max_chunks = std::min(options.scheduler.max_num_seqs, options.scheduler.max_num_batched_tokens);
    limits.block_table_width = std::min(blocks_per_seq, shape.num_blocks);
    limits.max_positions = std::min(options.scheduler.max_model_len, shape.num_blocks * shape.block_size);
    limits.block_size = options.block_size;
    limits.graph_batch_sizes = decodeGraphSizes(options, ops, backend, limits.max_chunks);
    batch_options_.block_size = options.block_size;
    batch_options_.block_table_width = limits.block_table_width;
    batch_options_.dual_batch_overlap = options.dual_batch_overlap;
    batch_options_.dbo_min_tokens = options.dbo_min_tokens;
    runner_ = std::make_unique<ModelRunner>(config, weights, ops, *kv_cache_, backend, limits);
    AFD_CHECK_OK(runner_->captureDecodeGraphs());
    sample_requests_.reserve(static_cast<size_t>(limits.max_chunks));
    sampled_.reserve(static_cast<size_t>(limits.max_chunks));
}

core::Result<std::unique_ptr<Engine>> Engine::create(const model::ModelConfig& config,
                                                     const model::ModelWeights& weights, DeviceOps& ops,
                                                     MlpBackend& backend, const EngineOptions& options) {
    AFD_RETURN_IF_ERROR(options.validate());
    try {
        return std::make_unique<Engine>(config, weights, ops, backend, options);
    } catch (const std::bad_alloc&) {
        return core::invalidArgument(
            "the KV cache and workspaces do not fit in {} memory: lower --num-kv-blocks, --kv-cache-mb, "
            "--max-num-seqs, --max-num-batched-tokens or --max-model-len",
            ops.device().toString());
    } catch (const core::Error& e) {
        return core::invalidArgument("setting up the engine on {}: {}", ops.device().toString(), e.what());
    }
}

core::Status Engine::checkParamsAndIds(std::span<const int32_t> prompt, const SamplingParams& params) const {
    AFD_RETURN_IF_ERROR(params.validate());
    for (size_t i = 0; i < prompt.size(); ++i) {
        if (prompt[i] < 0 || prompt[i] >= config_.vocab_size) {
            return core::invalidArgument("prompt token {} at index {} is outside the vocabulary [0, {})", prompt[i], i,
                                         config_.vocab_size);
        }
    }
    return core::Status::ok();
}

core::Status Engine::checkRequest(std::span<const int32_t> prompt, const SamplingParams& params) const {
    AFD_RETURN_IF_ERROR(checkParamsAndIds(prompt, params));
    return scheduler_->check(static_cast<int64_t>(prompt.size()), params.max_tokens);
}

core::Result<int64_t> Engine::addRequest(std::vector<int32_t> prompt, const SamplingParams& params,
                                         bool want_prompt_logits) {
    if (!health_.isOk()) return health_;
    AFD_RETURN_IF_ERROR(checkParamsAndIds(prompt, params));
    auto seq = std::make_unique<Sequence>();
    seq->id = next_request_id_++;
    seq->prompt = std::move(prompt);
    seq->params = params;
    seq->rng.seed(params.seed);
    seq->want_prompt_logits = want_prompt_logits;
    const int64_t id = seq->id;
    AFD_RETURN_IF_ERROR(scheduler_->add(std::move(seq)));
    return id;
}

StepOutput Engine::runStep() {
    AFD_CHECK(!finished_, "step() after finish()");
    StepOutput out;
    if (!health_.isOk()) {
        out.error = health_;
        return out;
    }
    ScheduledStep scheduled = scheduler_->schedule();
    if (scheduled.empty()) return out;
    out.num_tokens = scheduled.numTokens();
    out.num_sequences = static_cast<int64_t>(scheduled.chunks.size());
    const ForwardBatch batch = buildForwardBatch(scheduled, batch_options_);
    core::Result<core::Tensor> forward = runner_->forward(batch, next_step_++, false);
    if (!forward.isOk()) {
        failStep(scheduled, forward.status(), out);
        return out;
    }
    const core::Tensor logits = std::move(forward).value();
    const int64_t V = config_.vocab_size;
    // Rows of `logits` are the sampling chunks in order.
    sample_requests_.clear();
    int64_t row = 0;
    for (const auto& c : scheduled.chunks) {
        if (!c.sample) continue;
        Sequence& seq = *c.seq;
        if (seq.want_prompt_logits && seq.prompt_last_logits.empty() &&
            c.end == static_cast<int64_t>(seq.prompt.size())) {
            seq.prompt_last_logits.resize(static_cast<size_t>(V));
            ops_.copy(logits.slice(row, row + 1),
                      core::Tensor::view(seq.prompt_last_logits.data(), core::DType::kF32, {1, V}));
        }
        sample_requests_.push_back({&seq.params, &seq.rng, static_cast<int64_t>(seq.output.size())});
        ++row;
    }
    sampled_.resize(sample_requests_.size());
    ops_.sample(logits, sample_requests_, sampled_);
    ops_.synchronize();  // the prompt logits copies
    if (const core::Status completed = backend_.checkStepCompleted(); !completed.isOk()) {
        failStep(scheduled, completed, out);
        return out;
    }
    out.tokens.reserve(sampled_.size());
    row = 0;
    for (const auto& c : scheduled.chunks) {
        if (!c.sample) continue;
        Sequence& seq = *c.seq;
        const int32_t token = sampled_[static_cast<size_t>(row++)];
        seq.output.push_back(token);
        out.tokens.push_back({seq.id, token});
        const bool eos = !seq.params.ignore_eos && std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(),
                                                             token) != config_.eos_token_ids.end();
        const bool stop = std::find(seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end(), token) !=
                          seq.params.stop_token_ids.end();
        if (eos || stop) {
            seq.status = SequenceStatus::kFinished;
            seq.finish_reason = FinishReason::kStop;
        } else if (static_cast<int64_t>(seq.output.size()) >= seq.params.max_tokens) {
            seq.status = SequenceStatus::kFinished;
            seq.finish_reason = FinishReason::kLength;
        }
    }
    out.finished = scheduler_->complete(scheduled);
    return out;
}

void Engine::failStep(const ScheduledStep& scheduled, const core::Status& error, StepOutput& out) {
    out.error = error;
    // NOTE: work the failed step enqueued may still be on the ops' stream; the next step's ops come after it on the
    // same stream, so the freed blocks are rewritten only after it.
    out.finished = scheduler_->removeStep(scheduled);
    for (auto& seq : out.finished) markFailed(*seq, error);
    const core::Status reset = backend_.resetAfterFailedStep();
    if (reset.isOk()) return;
    health_ = core::Status(error.code(), fmt::format("{}: {}", reset.message(), error.message()));
    for (auto& seq : scheduler_->removeAll()) {
        markFailed(*seq, health_);
        out.finished.push_back(std::move(seq));
    }
}

core::Result<std::vector<std::unique_ptr<Sequence>>> Engine::step() {
    StepOutput out = runStep();
    if (!out.error.isOk()) return out.error;
    return std::move(out.finished);
}

std::unique_ptr<Sequence> Engine::abort(int64_t id) {
    std::unique_ptr<Sequence> seq = scheduler_->remove(id);
    if (seq != nullptr) {
        seq->status = SequenceStatus::kFinished;
        seq->finish_reason = FinishReason::kAborted;
    }
    return seq;
}

std::vector<std::unique_ptr<Sequence>> Engine::failAll(const core::Status& why) {
    std::vector<std::unique_ptr<Sequence>> removed = scheduler_->removeAll();
    for (auto& seq : removed) markFailed(*seq, why);
    return removed;
}

core::Status Engine::finish() {
    if (finished_) return core::Status::ok();
    finished_ = true;
    if (!health_.isOk()) return core::Status::ok();
    StepPlan plan;
    plan.step = next_step_++;
    plan.last = true;
    AFD_RETURN_IF_ERROR(backend_.beginStep(plan));
    return backend_.endStep();
}

}  // namespace afd::attention
