// The server's threads (internal to the http layer): a fixed number of workers and a bounded queue of connections
// waiting for one. A full queue refuses new work at once instead of holding sockets without limit.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace afd::http::detail {

class WorkerPool {
public:
    // Starts `num_threads` workers (at least 1); at most `max_queued` jobs wait while every worker is busy.
    WorkerPool(int num_threads, int max_queued);
    ~WorkerPool();  // shutdown()
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    // Queues `job` for a worker; false (and `job` untouched) when `max_queued` jobs already wait or after
    // shutdown(). Jobs must not throw. Thread-safe.
    bool tryPost(std::function<void()>& job);

    // Lets the workers finish every queued job, then joins them. Idempotent; not from a worker.
    void shutdown();

private:
    void work();

    const size_t max_queued_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool shutting_down_ = false;
    std::vector<std::jthread> workers_;
};

}  // namespace afd::http::detail
