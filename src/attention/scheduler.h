// Continuous batching: which sequences run in the next engine step and how many of their tokens.
//
// Each step has a token budget (max_num_batched_tokens) and a sequence budget (max_num_seqs). Running sequences
// go first (a decode is one token; an unfinished prefill continues with the next chunk), then waiting sequences
// are admitted in arrival order with prefill chunks that fit the remaining budget (chunked prefill). KV blocks
// are allocated as positions are scheduled; when they run out, the most recently admitted running sequence is
// preempted (its blocks freed; it recomputes its prompt and output later, so its tokens are unchanged).
// Not thread-safe: the engine thread owns it (check() excepted).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "attention/kv_cache.h"
#include "attention/sequence.h"
#include "core/status.h"

namespace afd::attention {

struct SchedulerOptions {
    int64_t max_num_seqs = 64;
    int64_t max_num_batched_tokens = 2048;
    int64_t max_model_len = 4096;  // prompt + output tokens of one sequence
    core::Status validate() const;
};

struct ScheduledChunk {
    Sequence* seq = nullptr;
    int64_t begin = 0;  // token positions [begin, end) computed this step
    int64_t end = 0;
    bool sample = false;  // the chunk reaches the sequence's last known token: sample the next one
};

struct ScheduledStep {
    std::vector<ScheduledChunk> chunks;
    int64_t numTokens() const;
    bool empty() const { return chunks.empty(); }
};

class Scheduler {
public:
    Scheduler(const SchedulerOptions& options, BlockAllocator& allocator, int64_t block_size);

    // Whether a sequence of `num_tokens` tokens that may grow by `max_tokens` can ever fit: a prompt, within
    // max_model_len, within the whole KV cache. Errors (kInvalidArgument) name the limit. Thread-safe: reads only
    // what is fixed at construction.
    core::Status check(int64_t num_tokens, int64_t max_tokens) const;
    // Takes ownership; the sequence waits until scheduled. Errors as check(), prefixed with "request <id>".
    core::Status add(std::unique_ptr<Sequence> seq);
    ScheduledStep schedule();
    // After a step: records computed tokens (the engine appended sampled tokens), retires finished sequences
    // and frees their blocks. Returns the sequences that finished in this step.
    std::vector<std::unique_ptr<Sequence>> complete(const ScheduledStep& step);

    // Between steps (no ScheduledStep in use, except the one passed to removeStep). Each frees the blocks of what it
    // removes and passes ownership to the caller; statuses are left for the caller to set.
    // The waiting or running sequence `id`, or nullptr when there is none.
    std::unique_ptr<Sequence> remove(int64_t id);
    // Every sequence of `step` (a step that failed: complete() is not called for it).
    std::vector<std::unique_ptr<Sequence>> removeStep(const ScheduledStep& step);
    // Every sequence, running ones first.
    std::vector<std::unique_ptr<Sequence>> removeAll();

    bool hasWork() const { return !waiting_.empty() || !running_.empty(); }
    int64_t numWaiting() const { return static_cast<int64_t>(waiting_.size()); }
    int64_t numRunning() const { return static_cast<int64_t>(running_.size()); }
    int64_t numPreemptions() const { return num_preemptions_; }

private:
    bool ensureBlocks(Sequence& seq, int64_t end);
    void preempt(std::unique_ptr<Sequence> seq);
    void freeBlocks(Sequence& seq);

    SchedulerOptions options_;
    BlockAllocator& allocator_;
    int64_t block_size_;
    std::deque<std::unique_ptr<Sequence>> waiting_;
    std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
    int64_t num_preemptions_ = 0;
};

}  // namespace afd::attention
