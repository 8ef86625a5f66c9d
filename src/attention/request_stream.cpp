#include "attention/request_stream.h"

#include <utility>

#include "core/check.h"

namespace afd::attention {

RequestStream::RequestStream(int64_t id, int64_t num_prompt_tokens, std::function<void()> on_output)
    : id_(id), num_prompt_tokens_(num_prompt_tokens), on_output_(std::move(on_output)) {}

std::optional<RequestOutput> RequestStream::next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (final_returned_) return std::nullopt;
    if (!cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || result_.has_value(); })) return std::nullopt;
    RequestOutput out;
    out.request_id = id_;
    out.new_token_ids = std::move(pending_);
    pending_.clear();
    out.num_prompt_tokens = num_prompt_tokens_;
    out.num_output_tokens = num_output_tokens_;
    if (result_) {
        out.finished = true;
        out.finish_reason = result_->finish_reason;
        out.error = result_->error;
        final_returned_ = true;
    }
    return out;
}

bool RequestStream::drained() const {
    std::lock_guard lock(mutex_);
    return final_returned_;
}

bool RequestStream::finished() const {
    std::lock_guard lock(mutex_);
    return result_.has_value();
}

std::optional<RequestResult> RequestStream::result() const {
    std::lock_guard lock(mutex_);
    return result_;
}

std::optional<RequestResult> RequestStream::waitResult(std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return result_.has_value(); })) return std::nullopt;
    return result_;
}

void RequestStream::append(int32_t token) {
    {
        std::lock_guard lock(mutex_);
        AFD_CHECK(!result_.has_value(), "request {}: a token after the end of its stream", id_);
        pending_.push_back(token);
        ++num_output_tokens_;
    }
    // NOTE: notify_all: a next() and a waitResult() may wait at once; waitResult's predicate keeps it waiting.
    cv_.notify_all();
    if (on_output_) on_output_();
}

void RequestStream::finish(RequestResult result) {
    {
        std::lock_guard lock(mutex_);
        if (result_.has_value()) return;
        result.request_id = id_;
        result_ = std::move(result);
    }
    cv_.notify_all();
    if (on_output_) on_output_();
}

}  // namespace afd::attention
