#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"
#include "core/env.h"

namespace afd::core {
namespace {

thread_local bool t_inside_body = false;

void runChunk(const std::function<void(int64_t, int64_t)>& body, int64_t n, int64_t num_chunks, int64_t chunk) {
    const int64_t begin = n * chunk / num_chunks;
    const int64_t end = n * (chunk + 1) / num_chunks;
    if (begin < end) body(begin, end);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
    AFD_CHECK(num_threads >= 1, "thread pool needs at least one thread, got {}", num_threads);
    for (int i = 1; i < num_threads; ++i) {
        workers_.emplace_back([this, i](std::stop_token stop) { workerLoop(stop, i); });
    }
}

ThreadPool::~ThreadPool() {
    for (auto& worker : workers_) worker.request_stop();
    work_cv_.notify_all();
    workers_.clear();  // joins
}

void ThreadPool::workerLoop(std::stop_token stop, int index) {
    uint64_t seen = 0;
    while (true) {
        const std::function<void(int64_t, int64_t)>* body = nullptr;
        int64_t n = 0;
        int64_t num_chunks = 0;
        {
            std::unique_lock lock(mutex_);
            if (!work_cv_.wait(lock, stop, [&] { return generation_ != seen; })) return;
            seen = generation_;
            body = body_;
            n = n_;
            num_chunks = num_chunks_;
        }
        if (index < num_chunks) {
            t_inside_body = true;
            runChunk(*body, n, num_chunks, index);
            t_inside_body = false;
        }
        {
            std::lock_guard lock(mutex_);
            if (--pending_ == 0) done_cv_.notify_one();
        }
    }
}

void ThreadPool::parallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
    const int64_t num_chunks = std::min<int64_t>(numThreads(), max_chunks);
    if (num_chunks == 1 || t_inside_body) {
        body(0, n);
        return;
    }
    std::lock_guard run_lock(run_mutex_);
    {
        std::lock_guard lock(mutex_);
        body_ = &body;
        n_ = n;
        num_chunks_ = num_chunks;
        pending_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    work_cv_.notify_all();
    t_inside_body = true;
    runChunk(body, n, num_chunks, 0);
    t_inside_body = false;
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    body_ = nullptr;
}

ThreadPool& ThreadPool::global() {
    static ThreadPool pool([] {
        const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
        Result<int64_t> n = envInt("AFD_NUM_THREADS", hw, 1, 1024);
        AFD_CHECK(n.isOk(), "{}", n.status().message());
        return static_cast<int>(n.value());
    }());
    return pool;
}

void parallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
    ThreadPool::global().parallelFor(n, min_chunk, body);
}

}  // namespace afd::core
