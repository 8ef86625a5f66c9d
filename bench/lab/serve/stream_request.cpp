#include "lab/serve/stream_request.h"

#include <optional>

namespace afd::lab {
namespace {

double secondsBetween(BenchClock::time_point from, BenchClock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

}  // namespace

RequestRecord runStreamRequest(http::HttpClient& client, const std::string& endpoint_path, BenchEndpoint endpoint,
                               const std::string& body, const BenchPrompt& prompt, BenchClock::time_point run_start) {
    RequestRecord record;
    record.input_len = prompt.input_len;
    record.output_len = prompt.output_len;
    bool done = false;
    bool first = true;
    int64_t counted_tokens = 0;
    std::optional<int64_t> usage_prompt;
    std::optional<int64_t> usage_completion;
    std::string error;
    BenchClock::time_point last_chunk{};
    const BenchClock::time_point sent = BenchClock::now();
    record.send_s = secondsBetween(run_start, sent);

    const auto on_event = [&](const http::SseEvent& event) {
        const BenchClock::time_point now = BenchClock::now();
        auto parsed = parseStreamChunk(event.data, endpoint);
        if (!parsed.isOk()) {
            error = parsed.status().message();
            return false;
        }
        const StreamChunk& chunk = *parsed;
        if (chunk.done) {
            done = true;
            record.e2e_s = secondsBetween(sent, now);
            return false;  // nothing follows the sentinel
        }
        if (!chunk.error.empty()) {
            error = "error event: " + chunk.error;
            return false;
        }
        if (chunk.prompt_tokens) usage_prompt = chunk.prompt_tokens;
        // Continuous usage (a usage object in every chunk) gives the tokens of a chunk without token ids.
        const std::optional<int64_t> previous_completion = usage_completion;
        if (chunk.completion_tokens) usage_completion = chunk.completion_tokens;
        if (!chunk.has_choice) return true;
        int64_t tokens = 0;
        if (chunk.token_ids) {
            tokens = *chunk.token_ids;
        } else if (chunk.completion_tokens && previous_completion) {
            tokens = *chunk.completion_tokens - *previous_completion;
        } else if (chunk.completion_tokens && first) {
            tokens = *chunk.completion_tokens;
        } else {
            tokens = chunk.has_text ? 1 : 0;
        }
        if (tokens <= 0) return true;  // a role or finish chunk: no output
        if (first) {
            record.ttft_s = secondsBetween(sent, now);
            record.itl_s.assign(static_cast<size_t>(tokens - 1), 0.0);
            first = false;
        } else {
            const double gap = secondsBetween(last_chunk, now) / static_cast<double>(tokens);
            record.itl_s.insert(record.itl_s.end(), static_cast<size_t>(tokens), gap);
        }
        last_chunk = now;
        counted_tokens += tokens;
        return true;
    };
    auto response = client.streamEvents("POST", endpoint_path, body, on_event);
    if (!response.isOk()) {
        record.error = response.status().message();
        return record;
    }
    record.http_status = response->status;
    if (response->status < 200 || response->status > 299) {
        record.error = "HTTP " + std::to_string(response->status) + ": " + errorMessage(response->body);
        return record;
    }
    if (!error.empty()) {
        record.error = error;
        return record;
    }
    if (!done) {
        record.error = "the stream ended without [DONE]";
        return record;
    }
    if (counted_tokens == 0) {
        record.error = "the stream carried no output token";
        return record;
    }
    record.usage_reported = usage_completion.has_value();
    record.output_tokens = usage_completion.value_or(counted_tokens);
    if (usage_prompt) record.input_len = *usage_prompt;
    record.success = true;
    return record;
}

}  // namespace afd::lab
