#include "lab/serve/load_run.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/check.h"
#include "lab/serve/arrivals.h"

namespace afd::lab {
namespace {

constexpr auto kWatchPeriod = std::chrono::milliseconds(20);
constexpr auto kMaxConnectTimeout = std::chrono::milliseconds(5000);

// What the watchdog (the calling thread) sees of one worker's request in flight.
struct Slot {
    std::mutex mutex;
    http::HttpClient* client = nullptr;  // set while a request is in flight
    BenchClock::time_point deadline{};
    bool timed_out = false;
    bool cancelled = false;
};

class LoadRun {
public:
    LoadRun(const std::vector<std::string>& bodies, const std::vector<BenchPrompt>& prompts,
            const LoadRunOptions& options)
        : bodies_(bodies),
          prompts_(prompts),
          options_(options),
          offsets_(arrivalOffsets(static_cast<int64_t>(prompts.size()), options.request_rate, options.burstiness,
                                  options.seed)),
          records_(prompts.size()) {}

    LoadRunResult run() {
        const int64_t cap = options_.max_concurrency > 0 ? options_.max_concurrency : kMaxClientThreads;
        const auto num_workers = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(prompts_.size()), cap));
        std::vector<Slot> slots(num_workers);
        start_ = BenchClock::now();
        last_end_ = start_;
        {
            std::vector<std::jthread> workers;
            workers.reserve(num_workers);
            for (size_t w = 0; w < num_workers; ++w) workers.emplace_back([this, &slot = slots[w]] { work(slot); });
            watch(slots);
        }  // joins the workers
        LoadRunResult result;
        result.duration_s = std::chrono::duration<double>(last_end_ - start_).count();
        result.max_concurrency_seen = max_in_flight_;
        result.interrupted = stop_.load();
        for (auto& record : records_) {
            if (record) {
                result.records.push_back(std::move(*record));
            } else {
                ++result.not_sent;
            }
        }
        return result;
    }

private:
    // The watchdog: aborts requests past their deadline, and everything on an interrupt, until every worker ended.
    void watch(std::vector<Slot>& slots) {
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                if (cv_.wait_for(lock, kWatchPeriod, [&] { return finished_workers_ == slots.size(); })) return;
            }
            const bool interrupted = options_.interrupt != nullptr && options_.interrupt->load();
            if (interrupted && !stop_.exchange(true)) cv_.notify_all();
            const BenchClock::time_point now = BenchClock::now();
            for (Slot& slot : slots) {
                std::lock_guard lock(slot.mutex);
                if (slot.client == nullptr) continue;
                if (stop_ && !slot.timed_out) slot.cancelled = true;
                if (now >= slot.deadline && !slot.cancelled) slot.timed_out = true;
                // Again every period: an abort that comes before the call began does nothing.
                if (slot.cancelled || slot.timed_out) slot.client->abort();
            }
        }
    }

    void work(Slot& slot) {
        for (;;) {
            const size_t i = next_.fetch_add(1);
            if (i >= prompts_.size()) break;
            {
                // Arrival: wait for the request's time unless the run is stopped.
                const auto arrival = start_ + std::chrono::duration_cast<BenchClock::duration>(
                                                  std::chrono::duration<double>(offsets_[i]));
                std::unique_lock lock(mutex_);
                cv_.wait_until(lock, arrival, [this] { return stop_.load(); });
                if (stop_) break;
            }
            records_[i] = sendOne(slot, i);
        }
        {
            std::lock_guard lock(mutex_);
            ++finished_workers_;
        }
        cv_.notify_all();
    }

    RequestRecord sendOne(Slot& slot, size_t i) {
        http::HttpClientOptions client_options;
        client_options.connect_timeout = std::min(options_.request_timeout, kMaxConnectTimeout);
        client_options.timeout = options_.request_timeout;
        http::HttpClient client(options_.host, options_.port, client_options);
        {
            std::lock_guard lock(slot.mutex);
            slot.client = &client;
            slot.deadline = BenchClock::now() + options_.request_timeout;
            slot.timed_out = false;
            slot.cancelled = false;
        }
        {
            std::lock_guard lock(mutex_);
            max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
        }
        RequestRecord record =
            runStreamRequest(client, options_.endpoint_path, options_.endpoint, bodies_[i], prompts_[i], start_);
        record.index = static_cast<int64_t>(i);
        {
            std::lock_guard lock(slot.mutex);
            slot.client = nullptr;
            if (slot.timed_out) {
                record.success = false;
                record.error = "no complete reply within the request timeout of " +
                               std::to_string(options_.request_timeout.count()) + " ms";
            } else if (slot.cancelled) {
                record.success = false;
                record.cancelled = true;
                record.error = "interrupted";
            }
        }
        {
            std::lock_guard lock(mutex_);
            --in_flight_;
            last_end_ = std::max(last_end_, BenchClock::now());
        }
        return record;
    }

    const std::vector<std::string>& bodies_;
    const std::vector<BenchPrompt>& prompts_;
    const LoadRunOptions& options_;
    const std::vector<double> offsets_;
    std::vector<std::optional<RequestRecord>> records_;  // each written by the one worker that took its index
    BenchClock::time_point start_{};
    std::atomic<size_t> next_{0};
    std::atomic<bool> stop_{false};

    std::mutex mutex_;
    std::condition_variable cv_;
    size_t finished_workers_ = 0;
    int64_t in_flight_ = 0;
    int64_t max_in_flight_ = 0;
    BenchClock::time_point last_end_{};
};

}  // namespace

LoadRunResult runLoad(const std::vector<std::string>& bodies, const std::vector<BenchPrompt>& prompts,
                      const LoadRunOptions& options) {
    AFD_CHECK(bodies.size() == prompts.size(), "runLoad: {} bodies for {} prompts", bodies.size(), prompts.size());
    AFD_CHECK(options.request_rate > 0 && options.burstiness > 0, "runLoad: rate {} and burstiness {} must be positive",
              options.request_rate, options.burstiness);
    AFD_CHECK(options.request_timeout.count() > 0, "runLoad: the request timeout must be positive");
    if (prompts.empty()) return {};
    return LoadRun(bodies, prompts, options).run();
}

}  // namespace afd::lab
