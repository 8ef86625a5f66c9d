// The load of `afd bench serve`: every prompt sent as one streaming request at its arrival time (lab/serve/
// arrivals.h), at most max_concurrency in flight (a request that arrives while the cap is reached waits for a free
// slot and is timed from its send), each on a connection of its own and bounded by the request timeout. The run
// always ends: a request past its timeout is aborted and fails, and an interrupt (Ctrl-C) aborts those in flight
// and sends no more.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lab/serve/stream_request.h"

namespace afd::lab {

// Requests in flight at most when no --max-concurrency caps them (one thread each).
inline constexpr int64_t kMaxClientThreads = 1024;

struct LoadRunOptions {
    std::string host = "127.0.0.1";
    int port = 0;
    std::string endpoint_path = "/v1/completions";
    BenchEndpoint endpoint = BenchEndpoint::kCompletions;
    double request_rate = 0;                            // requests per second; infinity: all at once
    double burstiness = 1.0;                            // gamma shape of the gaps (1: Poisson)
    int64_t max_concurrency = 0;                        // 0: no cap but kMaxClientThreads
    uint64_t seed = 0;                                  // of the arrival times
    std::chrono::milliseconds request_timeout{600000};  // from the send to the end of the stream
    const std::atomic<bool>* interrupt = nullptr;       // set (from a signal handler, say) to end the run early
};

struct LoadRunResult {
    std::vector<RequestRecord> records;  // the requests sent, by prompt index
    int64_t not_sent = 0;                // prompts never sent because of an interrupt
    bool interrupted = false;
    double duration_s = 0;             // from the start to the end of the last request
    int64_t max_concurrency_seen = 0;  // most requests in flight at once
};

// Sends bodies[i] (prompts[i] gives its lengths) as described above. Preconditions (AFD_CHECK): as many bodies as
// prompts, a positive rate and burstiness, a positive request timeout.
LoadRunResult runLoad(const std::vector<std::string>& bodies, const std::vector<BenchPrompt>& prompts,
                      const LoadRunOptions& options);

}  // namespace afd::lab
