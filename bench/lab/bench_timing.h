// What the device benchmarks (`afd bench moe`, `afd bench router`) share: RAII for the runtime objects they hold,
// event timing of graph replays, and the two rates every floor is stated against, measured in the same run.
// Host-only header (CUDA runtime types); throws core::Error on CUDA failures.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "lab/bench_result.h"

namespace afd::lab {

// The production library's runtime wrappers the benchmarks use (kernels/cuda/device_memory.h, device_info.h).
using kernels::cuda::DeviceBuffer;
using kernels::cuda::deviceCount;
using kernels::cuda::deviceInfo;
using kernels::cuda::Stream;

// Device memory and streams come from device_memory.h; a benchmark buffer is never empty (cudaMalloc(0) gives a
// null pointer the kernels would be handed).
class DeviceMemory : public DeviceBuffer {
public:
    explicit DeviceMemory(size_t bytes) : DeviceBuffer(std::max<size_t>(bytes, 256)), requested_(bytes) {}
    size_t bytes() const { return requested_; }

private:
    size_t requested_ = 0;
};

// A CUDA graph of what `body` enqueues on `stream` (relaxed capture mode: other threads may use the runtime
// meanwhile), instantiated once.
class Graph {
public:
    Graph(cudaStream_t stream, const std::function<void()>& body);
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    void launch(cudaStream_t stream) const;

private:
    cudaGraphExec_t exec_ = nullptr;
};

class Events {
public:
    explicit Events(size_t count);
    ~Events();
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
    cudaEvent_t operator[](size_t i) const { return events_[i]; }

private:
    std::vector<cudaEvent_t> events_;
};

struct Timing {
    double median_us = 0;
    double p10_us = 0;
    double p90_us = 0;
};

// Times `configs` alternatives together: warm-up rounds (at least `warmup`, and at least min_warmup_ms of device
// time), then `reps` rounds in which run(i, c) runs once for each c in turn, each run between its own pair of events;
// one Timing (median, 10th and 90th percentile) per c. Interleaved so that every alternative sees the same clocks:
// timed one after the other, at T >= 4096 the second of two configs measured 10-15 % slower than the first, whichever
// it was.
std::vector<Timing> timeInterleaved(cudaStream_t stream, int warmup, int reps, size_t configs,
                                    const std::function<void(int, size_t)>& run,
                                    double min_warmup_ms = kSteadyStateWarmupMs);

// timeInterleaved for one alternative: `reps` runs of run(i), each between a pair of events.
Timing timeRuns(cudaStream_t stream, int warmup, int reps, const std::function<void(int)>& run,
                double min_warmup_ms = kSteadyStateWarmupMs);

// count bf16 values uniform in [-scale, scale) from `seed`.
void fillRandom(void* ptr, size_t count, uint64_t seed, float scale, cudaStream_t stream);

// Name of device 0 (the benchmarks run there).
std::string benchDeviceName();

// Copy bandwidth in TB/s (bytes read + written) of a 2 GiB device-to-device copy, after warmup_ms of copies.
double measureCopyBandwidth(cudaStream_t stream, double warmup_ms);

// cuBLAS BF16 GEMM rates (TFLOP/s) at 8192^3 on random data, fp32 accumulation: after warmup_ms of the GEMM (the
// compute floor of series timed after as much warm-up) and in a burst (the median of 10 runs after 3, right after the
// copy measurement).
struct GemmRates {
    double warm_tflops = 0;
    double burst_tflops = 0;
};
GemmRates measureGemmRates(cudaStream_t stream, double warmup_ms);

// A benchmark's result with device 0's name and both rates measured on `stream` (each after warmup_ms of itself, as
// the benchmark's series), no rows yet.
template <class Row>
BenchResult<Row> startBenchResult(cudaStream_t stream, double warmup_ms) {
    BenchResult<Row> result;
    result.device = benchDeviceName();
    result.copy_tbps = measureCopyBandwidth(stream, warmup_ms);
    const GemmRates gemm = measureGemmRates(stream, warmup_ms);
    result.gemm_tflops = gemm.warm_tflops;
    result.gemm_burst_tflops = gemm.burst_tflops;
    return result;
}

}  // namespace afd::lab
