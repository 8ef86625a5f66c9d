#include "attention/scheduler.h"

#include <fmt/format.h>

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
        case FinishReason::kError:
            return "error";
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

core::Status Scheduler::check(int64_t num_tokens, int64_t max_tokens) const {
    if (num_tokens <= 0) return core::invalidArgument("the prompt is empty");
    // NOTE: compared as a difference: max_tokens may be anything up to INT64_MAX.
    if (num_tokens > options_.max_model_len || max_tokens > options_.max_model_len - num_tokens) {
        return core::invalidArgument("prompt ({} tokens) + max_tokens ({}) exceeds max_model_len {}", num_tokens,
                                     max_tokens, options_.max_model_len);
    }
    const int64_t longest = num_tokens + max_tokens;
    const int64_t blocks_needed = (longest + block_size_ - 1) / block_size_;
    if (blocks_needed > allocator_.numBlocks()) {
        return core::invalidArgument("needs {} KV blocks but the cache has {}", blocks_needed, allocator_.numBlocks());
    }
    return core::Status::ok();
}

core::Status Scheduler::add(std::unique_ptr<Sequence> seq) {
    AFD_RETURN_IF_ERROR(
        check(seq->numTokens(), seq->params.max_tokens).withContext(fmt::format("request {}", seq->id)));
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

std::unique_ptr<Sequence> Scheduler::remove(int64_t id) {
    std::unique_ptr<Sequence> seq;
    auto waiting = std::find_if(waiting_.begin(), waiting_.end(), [id](const auto& s) { return s->id == id; });
    if (waiting != waiting_.end()) {
        seq = std::move(*waiting);
        waiting_.erase(waiting);
    } else {
        auto running = std::find_if(running_.begin(), running_.end(), [id](const auto& s) { return s->id == id; });
        if (running == running_.end()) return nullptr;
        seq = std::move(*running);
        running_.erase(running);
    }
    freeBlocks(*seq);
    return seq;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::removeStep(const ScheduledStep& step) {
    std::vector<std::unique_ptr<Sequence>> removed;
    for (const auto& chunk : step.chunks) {
        // A chunk's sequence is running (schedule() admitted it), and appears once per step.
        auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& s) { return s.get() == chunk.seq; });
        AFD_CHECK(it != running_.end(), "sequence {} of the step is not running", chunk.seq->id);
        freeBlocks(**it);
        removed.push_back(std::move(*it));
        running_.erase(it);
    }
    return removed;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::removeAll() {
    std::vector<std::unique_ptr<Sequence>> removed;
    for (auto& seq : running_) {
        freeBlocks(*seq);
        removed.push_back(std::move(seq));
    }
    running_.clear();
    for (auto& seq : waiting_) {
        freeBlocks(*seq);
        removed.push_back(std::move(seq));
    }
    waiting_.clear();
    return removed;
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
