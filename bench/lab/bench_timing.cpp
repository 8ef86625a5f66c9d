#include "lab/bench_timing.h"

#include <cublas_v2.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "lab/fill_random.h"

namespace afd::lab {
namespace {

class CublasHandle {
public:
    CublasHandle() { AFD_CUBLAS_CHECK(cublasCreate(&handle_)); }
    ~CublasHandle() { (void)cublasDestroy(handle_); }
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    cublasHandle_t get() const { return handle_; }

private:
    cublasHandle_t handle_ = nullptr;
};

}  // namespace

std::string benchDeviceName() { return deviceInfo(0).name; }

Graph::Graph(cudaStream_t stream, const std::function<void()>& body) {
    AFD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (...) {
        // The stream leaves capture mode whatever body left it in, so the caller can go on using it.
        if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        throw;
    }
    AFD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t err = cudaGraphInstantiate(&exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    AFD_CUDA_CHECK(err);
}

Graph::~Graph() { (void)cudaGraphExecDestroy(exec_); }

void Graph::launch(cudaStream_t stream) const { AFD_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

Events::Events(size_t count) : events_(count) {
    for (auto& e : events_) {
        AFD_CUDA_CHECK(cudaEventCreate(&e));
    }
}

Events::~Events() {
    for (auto& e : events_) {
        (void)cudaEventDestroy(e);
    }
}

std::vector<Timing> timeInterleaved(cudaStream_t stream, int warmup, int reps, size_t configs,
                                    const std::function<void(int, size_t)>& run, double min_warmup_ms) {
    // Warm-up in batches, each timed, until both minimums are met; the next batch is sized from the time per round.
    Events marks(2);
    int rounds = 0;
    double elapsed_ms = 0;
    int batch = std::max(1, warmup);
    while (rounds < warmup || elapsed_ms < min_warmup_ms) {
        AFD_CUDA_CHECK(cudaEventRecord(marks[0], stream));
        for (int b = 0; b < batch; ++b) {
            for (size_t c = 0; c < configs; ++c) {
                run(rounds + b, c);
            }
        }
        AFD_CUDA_CHECK(cudaEventRecord(marks[1], stream));
        AFD_CUDA_CHECK(cudaEventSynchronize(marks[1]));
        float ms = 0;
        AFD_CUDA_CHECK(cudaEventElapsedTime(&ms, marks[0], marks[1]));
        rounds += batch;
        elapsed_ms += ms;
        const double per_round_ms = std::max(elapsed_ms / rounds, 1e-4);
        batch = static_cast<int>(std::clamp((min_warmup_ms - elapsed_ms) / per_round_ms + 1.0, 1.0, 65536.0));
    }
    Events events(2 * static_cast<size_t>(reps) * configs);
    for (int i = 0; i < reps; ++i) {
        for (size_t c = 0; c < configs; ++c) {
            const size_t e = 2 * (static_cast<size_t>(i) * configs + c);
            AFD_CUDA_CHECK(cudaEventRecord(events[e], stream));
            run(i, c);
            AFD_CUDA_CHECK(cudaEventRecord(events[e + 1], stream));
        }
    }
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<Timing> timings;
    for (size_t c = 0; c < configs; ++c) {
        std::vector<double> us(static_cast<size_t>(reps));
        for (int i = 0; i < reps; ++i) {
            const size_t e = 2 * (static_cast<size_t>(i) * configs + c);
            float ms = 0;
            AFD_CUDA_CHECK(cudaEventElapsedTime(&ms, events[e], events[e + 1]));
            us[static_cast<size_t>(i)] = ms * 1e3;
        }
        std::sort(us.begin(), us.end());
        auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1) + 0.5)]; };
        timings.push_back({at(0.5), at(0.1), at(0.9)});
    }
    return timings;
}

Timing timeRuns(cudaStream_t stream, int warmup, int reps, const std::function<void(int)>& run, double min_warmup_ms) {
    return timeInterleaved(
        stream, warmup, reps, 1, [&](int i, size_t) { run(i); }, min_warmup_ms)[0];
}

void fillRandom(void* ptr, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
    AFD_CUDA_CHECK(launchFillRandomBf16(static_cast<uint16_t*>(ptr), static_cast<int64_t>(count), seed, scale, stream));
}

double measureCopyBandwidth(cudaStream_t stream, double warmup_ms) {
    const size_t bytes = size_t{2} << 30;
    DeviceMemory src(bytes);
    DeviceMemory dst(bytes);
    fillRandom(src.get(), bytes / 2, 99, 1.0f, stream);
    const Timing t = timeRuns(
        stream, 3, 20,
        [&](int) { AFD_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream)); },
        warmup_ms);
    return 2.0 * static_cast<double>(bytes) / (t.median_us * 1e-6) / 1e12;
}

GemmRates measureGemmRates(cudaStream_t stream, double warmup_ms) {
    constexpr int n = 8192;
    const size_t count = static_cast<size_t>(n) * n;
    DeviceMemory a(count * 2);
    DeviceMemory b(count * 2);
    DeviceMemory c(count * 2);
    fillRandom(a.get(), count, 5, 1.0f, stream);
    fillRandom(b.get(), count, 6, 1.0f, stream);
    CublasHandle handle;
    AFD_CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
    const float alpha = 1.0f;
    const float beta = 0.0f;
    const auto gemm = [&](int) {
        AFD_CUBLAS_CHECK(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n,
                                      b.get(), CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    };
    const auto tflops = [](const Timing& t) {
        return 2.0 * n * static_cast<double>(n) * n / (t.median_us * 1e-6) / 1e12;
    };
    GemmRates rates;
    rates.burst_tflops = tflops(timeRuns(stream, 3, 10, gemm, 0.0));
    rates.warm_tflops = tflops(timeRuns(stream, 3, 20, gemm, warmup_ms));
    return rates;
}

}  // namespace afd::lab
