#include "attention/engine_loop.h"

#include <exception>
#include <utility>

#include "core/check.h"
#include "core/logging.h"

namespace afd::attention {
namespace {

RequestResult errorResult(const core::Status& why) {
    RequestResult r;
    r.finish_reason = FinishReason::kError;
    r.error = why;
    return r;
}

}  // namespace

EngineLoop::EngineLoop(Engine& engine, EngineLoopOptions options) : engine_(engine), options_(std::move(options)) {
    publish();
    thread_ = std::jthread([this](std::stop_token stop) { run(std::move(stop)); });
}

EngineLoop::~EngineLoop() {
    thread_.request_stop();
    std::lock_guard join_lock(join_mutex_);
    if (thread_.joinable()) thread_.join();
}

core::Result<std::shared_ptr<RequestStream>> EngineLoop::submit(EngineRequest request) {
    AFD_RETURN_IF_ERROR(engine_.checkRequest(request.prompt, request.params));
    std::shared_ptr<RequestStream> stream;
    {
        std::lock_guard lock(mutex_);
        if (!health_.isOk()) return health_;
        const int64_t id = next_id_++;
        stream = std::make_shared<RequestStream>(id, static_cast<int64_t>(request.prompt.size()), request.on_output);
        live_ids_.insert(id);
        queued_.push_back({id, std::move(request), stream});
    }
    wake_.notify_one();
    return stream;
}

bool EngineLoop::abort(int64_t request_id) {
    {
        std::lock_guard lock(mutex_);
        if (!accepting_ || !live_ids_.contains(request_id)) return false;
        aborts_.push_back(request_id);
    }
    wake_.notify_one();
    return true;
}

core::Status EngineLoop::health() const {
    std::lock_guard lock(mutex_);
    return health_;
}

EngineLoopStats EngineLoop::stats() const {
    std::lock_guard lock(mutex_);
    EngineLoopStats s = stats_;
    s.num_waiting += static_cast<int64_t>(queued_.size());
    return s;
}

core::Status EngineLoop::error() const {
    std::lock_guard lock(mutex_);
    return error_;
}

bool EngineLoop::stop(std::chrono::milliseconds timeout) {
    thread_.request_stop();
    {
        std::unique_lock lock(mutex_);
        if (!ended_cv_.wait_for(lock, timeout, [&] { return ended_; })) return false;
    }
    std::lock_guard join_lock(join_mutex_);
    if (thread_.joinable()) thread_.join();
    return true;
}

void EngineLoop::run(std::stop_token stop) {
    core::Status failure;
    std::vector<Submitted> submitted;
    std::vector<int64_t> aborts;
    try {
        while (true) {
            const bool busy = engine_.hasWork();
            {
                std::unique_lock lock(mutex_);
                if (!busy) wake_.wait(lock, stop, [&] { return !queued_.empty() || !aborts_.empty(); });
                if (stop.stop_requested()) break;
                submitted.swap(queued_);
                aborts.swap(aborts_);
            }
            // Submits before aborts, so that a request aborted before the engine thread saw it ends as aborted.
            admit(submitted);
            submitted.clear();
            applyAborts(aborts);
            aborts.clear();
            publish();
            flushEnded();
            if (engine_.hasWork()) {
                const auto start = std::chrono::steady_clock::now();
                StepOutput out = engine_.runStep();
                StepReport report;
                report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                report.step = engine_.numSteps();
                report.num_tokens = out.num_tokens;
                report.num_sequences = out.num_sequences;
                report.num_sampled = static_cast<int64_t>(out.tokens.size());
                report.error = out.error;
                if (!out.error.isOk()) {
                    AFD_LOG_WARN("engine step {} failed; its {} request(s) end with the error: {}", report.step,
                                 out.num_sequences, out.error.message());
                }
                deliver(out);
                if (options_.on_step) options_.on_step(report, engine_);
                publish();
                flushEnded();
            }
        }
    } catch (const std::exception& e) {
        failure = core::internalError("engine loop: {}", e.what());
    } catch (...) {
        failure = core::internalError("engine loop: an exception that is not a std::exception");
    }
    if (!failure.isOk()) AFD_LOG_ERROR("{}", failure.message());
    const core::Status why =
        failure.isOk() ? core::makeStatus(core::StatusCode::kCancelled, "the engine stopped before the request ended")
                       : failure;
    std::vector<Submitted> queued;
    {
        std::lock_guard lock(mutex_);
        accepting_ = false;
        error_ = failure;
        if (!failure.isOk()) {
            health_ = failure;
        } else if (health_.isOk()) {
            health_ = core::makeStatus(core::StatusCode::kCancelled, "the engine has stopped");
        }
        queued.swap(queued_);
        aborts_.clear();
    }
    for (auto& s : submitted) {
        if (s.stream != nullptr) queued.push_back(std::move(s));
    }
    try {
        endAll(why, queued);
        publish();
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("engine loop: ending the requests: {}", e.what());
    } catch (...) {
        AFD_LOG_ERROR("engine loop: ending the requests: an unknown exception");
    }
    flushEnded();
    {
        std::lock_guard lock(mutex_);
        ended_ = true;
    }
    ended_cv_.notify_all();
}

void EngineLoop::admit(std::vector<Submitted>& submitted) {
    for (auto& s : submitted) {
        const auto num_prompt = static_cast<uint64_t>(s.request.prompt.size());
        core::Result<int64_t> id =
            engine_.addRequest(std::move(s.request.prompt), s.request.params, s.request.want_prompt_logits);
        if (id.isOk()) {
            live_by_engine_id_[*id] = {s.id, s.stream};
            engine_id_of_[s.id] = *id;
            counts_.prompt_tokens += num_prompt;
        } else {
            ++counts_.num_failed;
            ended_ids_.push_back(s.id);
            ending_.push_back({s.stream, errorResult(id.status())});
        }
        s.stream.reset();  // handed on: nothing left to end here if a later entry throws
    }
}

void EngineLoop::applyAborts(const std::vector<int64_t>& ids) {
    for (const int64_t id : ids) {
        const auto it = engine_id_of_.find(id);
        if (it == engine_id_of_.end()) continue;  // ended meanwhile
        std::unique_ptr<Sequence> seq = engine_.abort(it->second);
        if (seq != nullptr) endSequence(*seq);
    }
}

void EngineLoop::deliver(StepOutput& out) {
    for (const SampledToken& t : out.tokens) {
        const auto it = live_by_engine_id_.find(t.id);
        AFD_CHECK(it != live_by_engine_id_.end(), "engine loop: a token for sequence {}, which no request owns", t.id);
        it->second.stream->append(t.token);
        ++counts_.generation_tokens;
    }
    for (auto& seq : out.finished) endSequence(*seq);
}

void EngineLoop::endSequence(Sequence& seq) {
    const auto it = live_by_engine_id_.find(seq.id);
    AFD_CHECK(it != live_by_engine_id_.end(), "engine loop: sequence {} ended, but no request owns it", seq.id);
    switch (seq.finish_reason) {
        case FinishReason::kAborted:
            ++counts_.num_aborted;
            break;
        case FinishReason::kError:
            ++counts_.num_failed;
            break;
        default:
            ++counts_.num_finished;
    }
    RequestResult r;
    r.prompt_ids = std::move(seq.prompt);
    r.output_ids = std::move(seq.output);
    r.prompt_last_logits = std::move(seq.prompt_last_logits);
    r.finish_reason = seq.finish_reason;
    r.error = seq.error;
    r.num_preemptions = seq.num_preemptions;
    ending_.push_back({std::move(it->second.stream), std::move(r)});
    ended_ids_.push_back(it->second.id);
    engine_id_of_.erase(it->second.id);
    live_by_engine_id_.erase(it);
}

void EngineLoop::endAll(const core::Status& why, std::vector<Submitted>& queued) {
    std::vector<std::unique_ptr<Sequence>> sequences;
    try {
        sequences = engine_.failAll(why);
    } catch (const std::exception& e) {
        // After an exception inside a step the engine may be inconsistent; its requests still end below.
        AFD_LOG_ERROR("engine loop: the engine could not release its requests: {}", e.what());
    }
    for (auto& seq : sequences) endSequence(*seq);
    for (auto& [engine_id, live] : live_by_engine_id_) {
        ++counts_.num_failed;
        ended_ids_.push_back(live.id);
        ending_.push_back({std::move(live.stream), errorResult(why)});
    }
    live_by_engine_id_.clear();
    engine_id_of_.clear();
    for (auto& s : queued) {
        ++counts_.num_failed;
        ended_ids_.push_back(s.id);
        ending_.push_back({std::move(s.stream), errorResult(why)});
    }
    queued.clear();
}

void EngineLoop::publish() {
    EngineLoopStats s = counts_;
    const Scheduler& scheduler = engine_.scheduler();
    s.num_waiting = scheduler.numWaiting();
    s.num_running = scheduler.numRunning();
    s.num_preemptions = scheduler.numPreemptions();
    const BlockAllocator& blocks = engine_.kvCache().allocator();
    s.num_kv_blocks = blocks.numBlocks();
    s.num_free_kv_blocks = blocks.numFree();
    s.num_steps = engine_.numSteps();
    const core::Status engine_health = engine_.health();
    std::lock_guard lock(mutex_);
    stats_ = s;
    for (const int64_t id : ended_ids_) live_ids_.erase(id);
    ended_ids_.clear();
    if (!engine_health.isOk() && health_.isOk()) health_ = engine_health;
}

void EngineLoop::flushEnded() {
    // NOTE: after publish(), so that a consumer that sees its stream end also sees the stats (freed blocks) and
    // health of that moment.
    for (auto& [stream, result] : ending_) {
        try {
            stream->finish(std::move(result));
        } catch (const std::exception& e) {
            AFD_LOG_ERROR("engine loop: request {}: its output callback threw: {}", stream->id(), e.what());
        } catch (...) {
            AFD_LOG_ERROR("engine loop: request {}: its output callback threw", stream->id());
        }
    }
    ending_.clear();
}

}  // namespace afd::attention
