// A fixed pool of worker threads for data-parallel CPU loops.
//
// Threads: parallelFor() runs the body on the calling thread and the pool's workers and returns when all
// chunks are done; bodies must not throw (a throw terminates: kernels check their inputs before the loop).
// One parallelFor runs at a time per pool; nested calls from inside a body run serially on that thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace afd::core {

class ThreadPool {
public:
    // `num_threads` counts the calling thread: 1 means no workers.
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

    // Splits [0, n) into contiguous chunks of at least `min_chunk` items and calls body(begin, end) on each.
    void parallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);

    // The process-wide pool: AFD_NUM_THREADS threads, default std::thread::hardware_concurrency().
    static ThreadPool& global();

private:
    void workerLoop(std::stop_token stop, int index);

    std::vector<std::jthread> workers_;
    std::mutex run_mutex_;  // one parallelFor at a time
    std::mutex mutex_;
    std::condition_variable_any work_cv_;
    std::condition_variable done_cv_;
    const std::function<void(int64_t, int64_t)>* body_ = nullptr;
    int64_t n_ = 0;
    int64_t num_chunks_ = 0;
    uint64_t generation_ = 0;
    int pending_ = 0;
};

// Shorthand for ThreadPool::global().parallelFor.
void parallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);

}  // namespace afd::core
