// RequestStream: one served request's outputs, handed from the engine thread (EngineLoop, the producer) to the code
// that answers the request (an HTTP handler thread, the consumer).
//
// The engine thread appends each token as its step samples it and ends the stream once (stop, length, abort or
// error). A consumer that streams calls next(): it returns every token appended since its previous call at once (a
// slow reader gets fewer, larger outputs; nothing is dropped), and last an output with `finished` set. A consumer
// that does not stream waits for the whole RequestResult (waitResult). Memory per stream is bounded by the request's
// max_tokens.
//
// Threads: next() and drained() from one consumer thread at a time; finished(), result() and waitResult() from any
// thread; the producer side (append, finish) is EngineLoop's. Shared ownership: the loop drops its reference when
// the stream ends; the consumer may drop its own at any time (e.g. a client that left, after EngineLoop::abort).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "attention/sequence.h"
#include "core/status.h"

namespace afd::attention {

// What next() returns: the tokens since the previous output, and, on the last output, how the request ended.
struct RequestOutput {
    int64_t request_id = 0;
    std::vector<int32_t> new_token_ids;  // sampled since the previous output (may be empty on the last one)
    bool finished = false;               // the last output of the stream
    FinishReason finish_reason = FinishReason::kNone;  // when finished: kStop, kLength, kAborted or kError
    core::Status error;                                // finish_reason kError: why (a failed step, a shutdown …)
    int64_t num_prompt_tokens = 0;
    int64_t num_output_tokens = 0;  // every token sampled so far, new_token_ids included (usage)
};

// The whole request once it has ended.
struct RequestResult {
    int64_t request_id = 0;
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> output_ids;        // every token sampled: what next()'s outputs concatenate to
    std::vector<float> prompt_last_logits;  // [vocab] when the request asked for them and its prefill ran
    FinishReason finish_reason = FinishReason::kNone;
    core::Status error;  // finish_reason kError: why
    int64_t num_preemptions = 0;
};

class RequestStream {
public:
    // `on_output` (optional) runs on the producer's thread after each append and after finish, once the new output
    // is readable: it must be cheap and must not block (e.g. wake an event loop).
    RequestStream(int64_t id, int64_t num_prompt_tokens, std::function<void()> on_output = {});
    RequestStream(const RequestStream&) = delete;
    RequestStream& operator=(const RequestStream&) = delete;

    int64_t id() const { return id_; }
    int64_t numPromptTokens() const { return num_prompt_tokens_; }

    // Consumer. Waits up to `timeout` for new tokens or the end; std::nullopt when none came in time, and at once
    // after the output with `finished` set has been returned (drained() is then true).
    std::optional<RequestOutput> next(std::chrono::milliseconds timeout);
    bool drained() const;

    // Any thread.
    bool finished() const;
    // The result once finished (std::nullopt before).
    std::optional<RequestResult> result() const;
    // Waits up to `timeout` for the end; the result, or std::nullopt when it did not end in time.
    std::optional<RequestResult> waitResult(std::chrono::milliseconds timeout) const;

    // Producer (the engine loop). append() after finish() is a bug (AFD_CHECK).
    void append(int32_t token);
    // Ends the stream with `result` (its id and counts are the stream's). A second finish is ignored.
    void finish(RequestResult result);

private:
    const int64_t id_;
    const int64_t num_prompt_tokens_;
    const std::function<void()> on_output_;
    mutable std::mutex mutex_;
    mutable std::condition_variable cv_;
    std::vector<int32_t> pending_;  // appended, not yet returned by next()
    int64_t num_output_tokens_ = 0;
    std::optional<RequestResult> result_;  // set once, by finish()
    bool final_returned_ = false;
};

}  // namespace afd::attention
