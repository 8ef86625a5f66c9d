#include "attention/engine.h"

#include <algorithm>
#include <limits>
#include <new>

#include "attention/sampler.h"
#include "core/check.h"

namespace afd::attention {

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
    return core::Status::ok();
}

Engine::Engine(const model::ModelConfig& config, const model::ModelWeights& weights, MlpBackend& backend,
               const EngineOptions& options)
    : config_(config), options_(options), backend_(backend) {
    AFD_CHECK_OK(options.validate());
    KvCacheShape shape;
    shape.num_layers = config.num_hidden_layers;
    shape.block_size = options.block_size;
    shape.num_kv_heads = config.num_key_value_heads;
    shape.head_dim = config.head_dim;
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
    kv_cache_ = std::make_unique<KvCache>(shape);
    scheduler_ = std::make_unique<Scheduler>(options.scheduler, kv_cache_->allocator(), options.block_size);
    runner_ = std::make_unique<ModelRunner>(config, weights, *kv_cache_, backend);
}

core::Result<std::unique_ptr<Engine>> Engine::create(const model::ModelConfig& config,
                                                     const model::ModelWeights& weights, MlpBackend& backend,
                                                     const EngineOptions& options) {
    AFD_RETURN_IF_ERROR(options.validate());
    try {
        return std::make_unique<Engine>(config, weights, backend, options);
    } catch (const std::bad_alloc&) {
        return core::invalidArgument(
            "the KV cache does not fit in memory: lower --num-kv-blocks, --kv-cache-mb, "
            "--max-num-seqs or --max-model-len");
    }
}

core::Result<int64_t> Engine::addRequest(std::vector<int32_t> prompt, const SamplingParams& params,
                                         bool want_prompt_logits) {
    AFD_RETURN_IF_ERROR(params.validate());
    for (size_t i = 0; i < prompt.size(); ++i) {
        if (prompt[i] < 0 || prompt[i] >= config_.vocab_size) {
            return core::invalidArgument("prompt token {} at index {} is outside the vocabulary [0, {})", prompt[i], i,
                                         config_.vocab_size);
        }
    }
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

ForwardBatch Engine::buildBatch(const ScheduledStep& step) const {
    ForwardBatch b;
    int64_t max_blocks = 1;
    for (const auto& c : step.chunks) max_blocks = std::max<int64_t>(max_blocks, c.seq->blocks.size());
    b.max_blocks_per_seq = max_blocks;
    b.block_tables.assign(step.chunks.size() * static_cast<size_t>(max_blocks), -1);
    std::vector<int64_t> chunk_starts;
    for (size_t row = 0; row < step.chunks.size(); ++row) {
        const auto& c = step.chunks[row];
        std::copy(c.seq->blocks.begin(), c.seq->blocks.end(), b.block_tables.begin() + row * max_blocks);
        chunk_starts.push_back(b.numTokens());
        for (int64_t pos = c.begin; pos < c.end; ++pos) {
            b.tokens.push_back(c.seq->tokenAt(pos));
            b.positions.push_back(static_cast<int32_t>(pos));
            b.token_seq.push_back(static_cast<int32_t>(row));
        }
        if (c.sample) b.logits_rows.push_back(b.numTokens() - 1);
    }
    b.stage_starts = {0};
    const int64_t T = b.numTokens();
    if (options_.dual_batch_overlap) {
        // Always two stages, so every attention rank of an AFD deployment sends the same number of stages; a step
        // too small to split leaves the second stage empty. Split at the chunk boundary closest to half the tokens
        // when one is near; otherwise inside a chunk (its second half attends to KV the first half wrote earlier in
        // the same layer).
        int64_t split = T;
        if (T >= options_.dbo_min_tokens) {
            split = T / 2;
            int64_t best_distance = T;
            for (int64_t start : chunk_starts) {
                if (start > 0 && std::llabs(start - T / 2) < best_distance) {
                    best_distance = std::llabs(start - T / 2);
                    if (best_distance <= T / 4) split = start;
                }
            }
        }
        b.stage_starts.push_back(split);
    }
    return b;
}

core::Result<std::vector<std::unique_ptr<Sequence>>> Engine::step() {
    AFD_CHECK(!finished_, "step() after finish()");
    ScheduledStep scheduled = scheduler_->schedule();
    if (scheduled.empty()) return std::vector<std::unique_ptr<Sequence>>{};
    AFD_CHECK(!broken_, "step() after a failed step");
    const ForwardBatch batch = buildBatch(scheduled);
    core::Result<core::Tensor> forward = runner_->forward(batch, next_step_++, false);
    if (!forward.isOk()) {
        broken_ = true;
        return forward.status();
    }
    core::Tensor logits = std::move(forward).value();
    size_t row = 0;
    for (const auto& c : scheduled.chunks) {
        if (!c.sample) continue;
        Sequence& seq = *c.seq;
        const float* l = logits.data<float>() + row * static_cast<size_t>(config_.vocab_size);
        ++row;
        if (seq.want_prompt_logits && seq.prompt_last_logits.empty() &&
            c.end == static_cast<int64_t>(seq.prompt.size())) {
            seq.prompt_last_logits.assign(l, l + config_.vocab_size);
        }
        const int32_t token = sampleToken(l, config_.vocab_size, seq.params, seq.rng);
        seq.output.push_back(token);
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
    return scheduler_->complete(scheduled);
}

core::Status Engine::finish() {
    if (finished_) return core::Status::ok();
    finished_ = true;
    if (broken_) return core::Status::ok();
    StepPlan plan;
    plan.step = next_step_++;
    plan.last = true;
    AFD_RETURN_IF_ERROR(backend_.beginStep(plan));
    return backend_.endStep();
}

}  // namespace afd::attention
