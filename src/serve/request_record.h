// RequestRecord: what the API server (serve/api_server.h) knows of one request once it has ended, handed to the
// serving metrics (serve/serving_metrics.h) for the latency histograms and the finish counters. Plain data; the
// server fills it on the thread that answered the request.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace afd::serve {

enum class RequestEnd {
    kStop,      // a stop token or stop string
    kLength,    // max_tokens or the context
    kAborted,   // the client left (or the server aborted it)
    kError,     // a failed step, a lost FFN peer, a shutdown
    kRejected,  // refused before the engine took it (validation, an unhealthy engine)
};

struct RequestRecord {
    using Clock = std::chrono::steady_clock;

    std::string endpoint;  // "completions" or "chat_completions"
    bool stream = false;
    RequestEnd end = RequestEnd::kStop;
    int64_t num_prompt_tokens = 0;
    int64_t num_output_tokens = 0;
    Clock::time_point arrival;  // the request's body was read
    // Each engine output that carried tokens, as it reached the server: (time, tokens in it). The first entry's time
    // is the first token (TTFT = outputs[0].first - arrival); inter-token latency is the gap between consecutive
    // entries, spread over the later entry's tokens. Empty when no token came.
    std::vector<std::pair<Clock::time_point, int64_t>> outputs;
    Clock::time_point finished;  // the reply was complete (or the client gone)
};

}  // namespace afd::serve
