#include "attention/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace afd::attention {

std::string_view finishReasonName(FinishReason reason) {
    switch (reason) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kAborted:
            return "abort";
    }
    return "unknown";
}

core::Status SchedulerOptions::validate() const {
    if (max_num_seqs < 1) return core::invalidArgument("max_num_seqs must be >= 1, got {}", max_num_seqs);
    if (max_num_batched_tokens < 1) {
        return core::invalidArgument("max_num_batched_tokens must be >= 1, got {}", max_num_batched_tokens);
    }
    if (max_model_len < 2 || max_model_len > (int64_t{1} << 30)) {
        return core::invalidArgument("max_model_len must be in [2, 2^30], got {}", max_model_len);
    }
    if (max_num_seqs > (int64_t{1} << 20))
        return core::invalidArgument("max_num_seqs must be <= 2^20, got {}", max_num_seqs);
    return core::Status::ok();
}

int64_t ScheduledStep::numTokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.end - c.begin;
    return n;
}

Scheduler::Scheduler(const SchedulerOptions& options, BlockAllocator& allocator, int64_t block_size)
    : options_(options), allocator_(allocator), block_size_(block_size) {}

core::Status Scheduler::add(std::unique_ptr<Sequence> seq) {
    if (seq->prompt.empty()) return core::invalidArgument("request {}: the prompt is empty", seq->id);
    // NOTE: compared as a difference: max_tokens may be anything up to INT64_MAX.
    if (seq->numTokens() > options_.max_model_len ||
        seq->params.max_tokens > options_.max_model_len - seq->numTokens()) {
        return core::invalidArgument("request {}: prompt ({} tokens) + max_tokens ({}) exceeds max_model_len {}",
                                     seq->id, seq->numTokens(), seq->params.max_tokens, options_.max_model_len);
    }
    const int64_t longest = seq->numTokens() + seq->params.max_tokens;
    const int64_t blocks_needed = (longest + block_size_ - 1) / block_size_;
    if (blocks_needed > allocator_.numBlocks()) {
        return core::invalidArgument("request {}: needs {} KV blocks but the cache has {}", seq->id, blocks_needed,
                                     allocator_.numBlocks());
    }
    seq->status = SequenceStatus::kWaiting;
    waiting_.push_back(std::move(seq));
    return core::Status::ok();
}

bool Scheduler::ensureBlocks(Sequence& seq, int64_t end) {
    const int64_t needed = (end + block_size_ - 1) / block_size_;
    while (static_cast<int64_t>(seq.blocks.size()) < needed) {
        auto block = allocator_.allocate();
        if (!block) return false;
        seq.blocks.push_back(*block);
    }
    return true;
}

void Scheduler::freeBlocks(Sequence& seq) {
    for (int32_t b : seq.blocks) allocator_.release(b);
    seq.blocks.clear();
}

void Scheduler::preempt(std::unique_ptr<Sequence> seq) {
    freeBlocks(*seq);
    seq->num_computed = 0;
    seq->status = SequenceStatus::kWaiting;
    ++seq->num_preemptions;
    ++num_preemptions_;
    waiting_.push_front(std::move(seq));
}

ScheduledStep Scheduler::schedule() {
    ScheduledStep step;
    int64_t budget = options_.max_num_batched_tokens;
    // Running sequences first, oldest first; preempt from the back when blocks run out.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence& seq = *running_[i];
        const int64_t n = std::min(seq.numTokens() - seq.num_computed, budget);
        const int64_t end = seq.num_computed + n;
        bool fits = ensureBlocks(seq, end);
        while (!fits && running_.size() > i + 1) {
            auto victim = std::move(running_.back());
            running_.pop_back();
            preempt(std::move(victim));
            fits = ensureBlocks(seq, end);
        }
        if (!fits) {
            // Even alone it does not fit now: preempt it too and let it retry when blocks free up.
            auto self = std::move(running_[i]);
            running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
            preempt(std::move(self));
            continue;
        }
        step.chunks.push_back({&seq, seq.num_computed, end, end == seq.numTokens()});
        budget -= n;
        ++i;
    }
    // Admit waiting sequences in order while budget, sequence slots and blocks allow.
    while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
        Sequence& seq = *waiting_.front();
        const int64_t n = std::min(seq.numTokens() - seq.num_computed, budget);
        const int64_t end = seq.num_computed + n;
        if (!ensureBlocks(seq, end)) {
            freeBlocks(seq);
            break;
        }
        seq.status = SequenceStatus::kRunning;
        step.chunks.push_back({&seq, seq.num_computed, end, end == seq.numTokens()});
        budget -= n;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
    return step;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::complete(const ScheduledStep& step) {
    for (const auto& chunk : step.chunks) chunk.seq->num_computed = chunk.end;
    std::vector<std::unique_ptr<Sequence>> finished;
    for (size_t i = 0; i < running_.size();) {
        if (running_[i]->status == SequenceStatus::kFinished) {
            freeBlocks(*running_[i]);
            finished.push_back(std::move(running_[i]));
            running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
            ++i;
        }
    }
    return finished;
}

}  // namespace afd::attention
