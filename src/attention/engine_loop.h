// EngineLoop: an Engine on a thread of its own (the engine thread), fed by a thread-safe submit/abort queue, for
// serving (continuous batching).
//
// Any thread submits requests and aborts them; the engine thread picks both up between steps, runs a step while
// there is work, and sleeps on a condition variable when there is none. Each request's tokens go to its
// RequestStream (request_stream.h) as its steps sample them, and the stream ends with the request: stop or length;
// kAborted after abort() (its KV blocks freed); kError when its step failed (only that step's requests: the engine
// keeps serving when its backend recovers), when the engine became unhealthy (AFD: a lost FFN peer fails every
// request, and health() says why from then on), or when the loop stops.
//
// Errors and exceptions: nothing throws out of the engine thread. A step's failure is the engine's to report (see
// engine.h); an exception (a broken invariant, a device error) ends the loop: it is stored as the first error
// (kInternal), every request ends with it, and health() and submit() report it.
//
// Stopping: stop(timeout) asks the engine thread to stop after the step in flight (bounded by the step's own waits:
// the connector's step timeout under AFD), ends every request still waiting or running with kError (kCancelled
// code), and joins within the bound. The destructor stops without a bound.
//
// Ownership: the engine (and everything it references) outlives the loop; while the loop runs, only the engine
// thread uses it (Engine::checkRequest, which submit() calls, is the thread-safe exception).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attention/engine.h"
#include "attention/request_stream.h"
#include "attention/sampling_params.h"
#include "core/status.h"

namespace afd::attention {

struct EngineRequest {
    std::vector<int32_t> prompt;
    SamplingParams params;
    bool want_prompt_logits = false;  // RequestResult::prompt_last_logits
    // Runs on the engine thread whenever the request's stream has a new output (RequestStream's on_output): cheap and
    // non-blocking; it may call abort(), never stop(). Optional.
    std::function<void()> on_output = nullptr;
};

// One step, as the engine thread saw it (for metrics).
struct StepReport {
    uint64_t step = 0;          // the engine's step count after it
    int64_t num_tokens = 0;     // tokens computed
    int64_t num_sequences = 0;  // sequences that ran
    int64_t num_sampled = 0;    // tokens sampled
    double seconds = 0.0;       // wall time of Engine::runStep
    core::Status error;         // the step's failure (its requests ended with it)
};

struct EngineLoopOptions {
    // Runs on the engine thread after every step, with the engine (read-only: its KV cache, its backend's layer
    // timings). Must be cheap and must not throw (an exception ends the loop as any other). Optional.
    std::function<void(const StepReport&, const Engine&)> on_step;
};

// A snapshot, published by the engine thread after each step (and each batch of submits and aborts).
struct EngineLoopStats {
    int64_t num_waiting = 0;  // submitted and not yet running (queued for the engine thread or waiting in it)
    int64_t num_running = 0;
    int64_t num_kv_blocks = 0;
    int64_t num_free_kv_blocks = 0;
    uint64_t num_steps = 0;
    int64_t num_preemptions = 0;
    uint64_t prompt_tokens = 0;      // prompts the engine took
    uint64_t generation_tokens = 0;  // tokens sampled
    uint64_t num_finished = 0;       // requests that ended with stop or length
    uint64_t num_aborted = 0;
    uint64_t num_failed = 0;  // requests that ended with kError (refused on the engine thread included)
};

class EngineLoop {
public:
    // Starts the engine thread.
    explicit EngineLoop(Engine& engine, EngineLoopOptions options = {});
    ~EngineLoop();
    EngineLoop(const EngineLoop&) = delete;
    EngineLoop& operator=(const EngineLoop&) = delete;

    // Thread-safe. Checks the request (Engine::checkRequest: kInvalidArgument naming the field or limit) and queues
    // it; its stream's id is the request id abort() takes. Refused with health() while the loop is unhealthy or
    // stopped.
    core::Result<std::shared_ptr<RequestStream>> submit(EngineRequest request);
    // Thread-safe. Cancels request `request_id` (queued, waiting or running): its stream ends with kAborted and its
    // blocks are freed, unless it ends otherwise first. False when it is not live (unknown or already ended).
    bool abort(int64_t request_id);

    // Thread-safe. Ok while serving; else why not: the engine's health (AFD: kPeerLost …), the loop's first error
    // (kInternal), or kCancelled once stopped.
    core::Status health() const;
    EngineLoopStats stats() const;
    // The first exception the engine thread caught (kInternal), or ok.
    core::Status error() const;

    // Asks the engine thread to stop (see above) and waits up to `timeout` for it; true once it has ended and is
    // joined. False when it did not end in time: the thread still uses the engine, which must then stay alive (call
    // again, or let the destructor wait). Thread-safe; idempotent.
    bool stop(std::chrono::milliseconds timeout);

private:
    struct Submitted {
        int64_t id = 0;
        EngineRequest request;
        std::shared_ptr<RequestStream> stream;
    };
    struct Live {
        int64_t id = 0;  // the loop's (the stream's)
        std::shared_ptr<RequestStream> stream;
    };

    void run(std::stop_token stop);
    // Engine thread: between steps.
    void admit(std::vector<Submitted>& submitted);
    void applyAborts(const std::vector<int64_t>& ids);
    void deliver(StepOutput& out);
    void endSequence(Sequence& seq);
    void endAll(const core::Status& why, std::vector<Submitted>& queued);
    // Publishes the stats and the engine's health, and forgets the ids of the requests that ended.
    void publish();
    // Then ends their streams (never throws).
    void flushEnded();

    Engine& engine_;
    const EngineLoopOptions options_;

    // Shared between the engine thread and callers.
    mutable std::mutex mutex_;
    std::mutex join_mutex_;             // one joiner at a time (stop() and the destructor)
    std::condition_variable_any wake_;  // the engine thread waits on it when idle
    std::condition_variable ended_cv_;  // stop() waits on it
    int64_t next_id_ = 0;
    std::vector<Submitted> queued_;
    std::vector<int64_t> aborts_;
    std::unordered_set<int64_t> live_ids_;  // submitted and not yet ended
    bool accepting_ = true;
    bool ended_ = false;  // the engine thread has left its loop and ended every request
    core::Status health_;
    core::Status error_;
    EngineLoopStats stats_;

    // Engine thread only.
    std::unordered_map<int64_t, Live> live_by_engine_id_;
    std::unordered_map<int64_t, int64_t> engine_id_of_;  // the loop's id → the engine's
    std::vector<int64_t> ended_ids_;                     // since the last publish()
    // Requests that ended since the last flushEnded(), with their results.
    std::vector<std::pair<std::shared_ptr<RequestStream>, RequestResult>> ending_;
    EngineLoopStats counts_;  // the counters of stats_, kept here between publishes

    std::jthread thread_;  // last: started once every member above exists
};

}  // namespace afd::attention
