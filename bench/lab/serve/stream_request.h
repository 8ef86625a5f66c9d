// One streaming request of `afd bench serve` and what it measured: the send time, the time of every chunk that
// carried output and how many tokens it carried, and the outcome. TTFT = the first output chunk − the send; ITL =
// the gap before each later output chunk, split evenly over the tokens it carried (the extra tokens of the first
// chunk count as gaps of 0, so the ITLs of a request sum to its decode time over output_tokens − 1 entries); E2E
// = the end of the stream ("[DONE]") − the send.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "http/http_client.h"
#include "lab/serve/openai_stream.h"

namespace afd::lab {

using BenchClock = std::chrono::steady_clock;

struct RequestRecord {
    int64_t index = 0;  // the prompt's index
    bool success = false;
    bool cancelled = false;     // ended by an interrupt (Ctrl-C), neither success nor failure
    std::string error;          // why it failed (empty on success)
    int http_status = 0;        // 0: no reply
    int64_t input_len = 0;      // the prompt's length: usage.prompt_tokens when reported, else the sampled length
    int64_t output_len = 0;     // max_tokens asked for
    int64_t output_tokens = 0;  // usage.completion_tokens when reported, else the tokens the chunks carried
    bool usage_reported = false;
    double send_s = 0;  // seconds from the start of the run
    double ttft_s = 0;
    double e2e_s = 0;
    std::vector<double> itl_s;  // one per output token after the first
};

// Sends `body` to `endpoint_path` through `client` and reads the event stream to its end. A reply that is not 2xx, an
// error event, a stream that ends without "[DONE]" or without any output token, and a failed call are failures,
// with the server's or the client's message. `prompt` gives the sampled lengths.
RequestRecord runStreamRequest(http::HttpClient& client, const std::string& endpoint_path, BenchEndpoint endpoint,
                               const std::string& body, const BenchPrompt& prompt, BenchClock::time_point run_start);

}  // namespace afd::lab
