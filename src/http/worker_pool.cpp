#include "http/worker_pool.h"

#include <algorithm>

namespace afd::http::detail {
WorkerPool::WorkerPool(int num_threads, int max_queued) : max_queued_(static_cast<size_t>(std::max(0, max_queued))) {
    const int count = std::max(1, num_threads);
    workers_.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) workers_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() { shutdown(); }

bool WorkerPool::tryPost(std::function<void()>& job) {
    {
        std::lock_guard lock(mutex_);
        if (shutting_down_ || jobs_.size() >= max_queued_) return false;
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
}

void WorkerPool::shutdown() {
    {
        std::lock_guard lock(mutex_);
        shutting_down_ = true;
    }
    cv_.notify_all();
    for (std::jthread& worker : workers_) {
        if (worker.joinable()) worker.join();
    }
}

void WorkerPool::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [this] { return shutting_down_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // shutting down with nothing left
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

}  // namespace afd::http::detail
