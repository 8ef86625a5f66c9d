// CudaOps: construction, memory, copies, graphs, reserve and sampling (the model ops are in cuda_ops_model.cpp).
#include "attention/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "attention/cpu_ops.h"
#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/dense_cuda.h"
#include "kernels/paged_attention_cuda.h"
#include "kernels/sampling_cuda.h"

namespace afd::attention {
namespace {

using core::DType;
using core::Tensor;

constexpr size_t kCopyScratchBytes = size_t{8} << 20;
constexpr size_t kSampleAlign = 16;

size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Makes `gpu` current and returns it (the members after gpu_ are created on it).
int selectGpu(int gpu) {
    AFD_CUDA_CHECK(cudaSetDevice(gpu));
    return gpu;
}

kernels::ActDType actDType(DType dtype) {
    AFD_CHECK(dtype == DType::kF32 || dtype == DType::kBf16, "CudaOps: no conversion of {}", core::dtypeName(dtype));
    return dtype == DType::kF32 ? kernels::ActDType::kF32 : kernels::ActDType::kBf16;
}

// Frees a device allocation on its own GPU, whichever is current when the last tensor goes.
struct DeviceFree {
    int gpu;
    void operator()(void* ptr) const noexcept {
        int previous = 0;
        const bool restore = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(gpu) == cudaSuccess;
        if (cudaFree(ptr) != cudaSuccess) AFD_LOG_WARN("cudaFree of a cuda:{} tensor failed", gpu);
        if (restore) (void)cudaSetDevice(previous);
    }
};

struct HostFree {
    void operator()(void* ptr) const noexcept {
        if (cudaFreeHost(ptr) != cudaSuccess) AFD_LOG_WARN("cudaFreeHost of a pinned tensor failed");
    }
};

// Where each per-row sampling parameter sits in one buffer of R rows (host staging and device copy alike).
struct SampleLayout {
    size_t temperature = 0;  // float [R]
    size_t top_p = 0;        // float [R]
    size_t top_k = 0;        // int32 [R]
    size_t seed = 0;         // uint64 [R]
    size_t offset = 0;       // uint64 [R]
    size_t bytes = 0;
};

SampleLayout sampleLayout(int64_t rows) {
    const auto r = static_cast<size_t>(rows);
    SampleLayout l;
    size_t at = 0;
    auto take = [&at](size_t bytes) {
        const size_t offset = at;
        at = alignUp(at + bytes, kSampleAlign);
        return offset;
    };
    l.temperature = take(r * sizeof(float));
    l.top_p = take(r * sizeof(float));
    l.top_k = take(r * sizeof(int32_t));
    l.seed = take(r * sizeof(uint64_t));
    l.offset = take(r * sizeof(uint64_t));
    l.bytes = at;
    return l;
}

}  // namespace

CudaOps::CudaOps(int gpu)
    : gpu_(selectGpu(gpu)), gemm_(std::make_unique<kernels::cuda::CublasLtGemm>(gpu)), scratch_(kCopyScratchBytes) {}

CudaOps::~CudaOps() {
    // NOTE: work still enqueued may use the buffers freed below.
    (void)cudaSetDevice(gpu_);
    (void)cudaStreamSynchronize(stream_.get());
    graphs_.clear();
}

void CudaOps::makeCurrent() const { AFD_CUDA_CHECK(cudaSetDevice(gpu_)); }

Tensor CudaOps::empty(DType dtype, core::Shape shape) {
    makeCurrent();
    const size_t bytes = static_cast<size_t>(core::shapeNumel(shape)) * core::dtypeSize(dtype);
    void* ptr = nullptr;
    const cudaError_t allocated = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
    if (allocated == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw std::bad_alloc();
    }
    AFD_CUDA_CHECK(allocated);
    std::shared_ptr<void> owner(ptr, DeviceFree{gpu_});
    return Tensor::wrap(ptr, dtype, std::move(shape), device(), std::move(owner));
}

Tensor CudaOps::emptyHost(DType dtype, core::Shape shape) {
    makeCurrent();
    const size_t bytes = static_cast<size_t>(core::shapeNumel(shape)) * core::dtypeSize(dtype);
    void* ptr = nullptr;
    const cudaError_t allocated = cudaMallocHost(&ptr, std::max<size_t>(bytes, 1));
    if (allocated == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw std::bad_alloc();
    }
    AFD_CUDA_CHECK(allocated);
    std::shared_ptr<void> owner(ptr, HostFree{});
    return Tensor::wrap(ptr, dtype, std::move(shape), core::Device::cpu(), std::move(owner));
}

void CudaOps::copy(const Tensor& src, const Tensor& dst) {
    const bool src_host = src.device().isCpu();
    const bool dst_host = dst.device().isCpu();
    AFD_CHECK((src_host || src.device() == device()) && (dst_host || dst.device() == device()),
              "CudaOps on {}: copy from {} to {}", device().toString(), src.device().toString(),
              dst.device().toString());
    AFD_CHECK(src.numel() == dst.numel(), "CudaOps: copy of {} into {}: element counts differ",
              core::shapeToString(src.shape()), core::shapeToString(dst.shape()));
    const int64_t n = src.numel();
    if (n == 0) return;
    AFD_CHECK(src.rawData() != nullptr && dst.rawData() != nullptr, "CudaOps: copy of a tensor with no data");
    makeCurrent();
    if (src.dtype() == dst.dtype()) {
        AFD_CUDA_CHECK(cudaMemcpyAsync(dst.rawData(), src.rawData(), src.nbytes(), cudaMemcpyDefault, cudaStream()));
        return;
    }
    const kernels::ActDType from = actDType(src.dtype());
    const kernels::ActDType to = actDType(dst.dtype());
    if (!src_host && !dst_host) {
        kernels::castCuda({n, from, to, src.rawData(), dst.rawData()}, cudaStream());
        return;
    }
    if (src_host && dst_host) {
        synchronize();  // host memory written by copies still in flight
        CpuOps().copy(src, dst);
        return;
    }
    convertAcross(src, dst);
}

void CudaOps::convertAcross(const Tensor& src, const Tensor& dst) {
    const bool to_device = src.device().isCpu();
    const int64_t n = src.numel();
    const size_t src_size = core::dtypeSize(src.dtype());
    const size_t dst_size = core::dtypeSize(dst.dtype());
    // Pieces of whole 64-element runs, so that every piece starts 16-byte aligned where its tensor does.
    const auto piece = static_cast<int64_t>(scratch_.bytes() / sizeof(float) / 64 * 64);
    const auto* s = static_cast<const char*>(src.rawData());
    auto* d = static_cast<char*>(dst.rawData());
    const kernels::ActDType from = actDType(src.dtype());
    const kernels::ActDType to = actDType(dst.dtype());
    for (int64_t at = 0; at < n; at += piece) {
        const int64_t m = std::min(piece, n - at);
        const char* s_at = s + static_cast<size_t>(at) * src_size;
        char* d_at = d + static_cast<size_t>(at) * dst_size;
        if (to_device) {
            AFD_CUDA_CHECK(cudaMemcpyAsync(scratch_.get(), s_at, static_cast<size_t>(m) * src_size,
                                           cudaMemcpyHostToDevice, cudaStream()));
            kernels::castCuda({m, from, to, scratch_.get(), d_at}, cudaStream());
        } else {
            kernels::castCuda({m, from, to, s_at, scratch_.get()}, cudaStream());
            AFD_CUDA_CHECK(cudaMemcpyAsync(d_at, scratch_.get(), static_cast<size_t>(m) * dst_size,
                                           cudaMemcpyDeviceToHost, cudaStream()));
        }
    }
}

void CudaOps::synchronize() {
    makeCurrent();
    AFD_CUDA_CHECK(cudaStreamSynchronize(cudaStream()));
}

int64_t CudaOps::storedHeadDim(int64_t head_dim) const { return kernels::pagedAttentionHeadDim(head_dim); }

void CudaOps::reserve(const model::ModelConfig& c, const StepLimits& limits) {
    makeCurrent();
    const int64_t hd = storedHeadDim(c.head_dim);
    AFD_CHECK(hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256,
              "{}: head_dim {} is not one the CUDA attention kernels take (16, 32, 64, 128, 256) or store padded to "
              "one (an even head_dim below 256)",
              device().toString(), c.head_dim);
    AFD_CHECK(limits.block_size == 0 || limits.block_size == 16 || limits.block_size == 32 || limits.block_size == 64 ||
                  limits.block_size == 128,
              "{}: KV block_size {} is not one the CUDA attention kernels take (16, 32, 64, 128)", device().toString(),
              limits.block_size);
    AFD_CHECK(c.hidden_size % 8 == 0, "{}: hidden_size {} must be a multiple of 8 (16-byte rows)", device().toString(),
              c.hidden_size);
    AFD_CHECK(c.vocab_size % 4 == 0, "{}: vocab_size {} must be a multiple of 4 (16-byte FP32 logits rows)",
              device().toString(), c.vocab_size);
    const size_t attention_bytes = kernels::pagedAttentionWorkspaceBytes(
        static_cast<int>(limits.max_chunks), 1, static_cast<int>(c.num_attention_heads), static_cast<int>(hd),
        static_cast<int>(limits.max_positions));
    if (attention_bytes > attention_workspace_.bytes()) {
        attention_workspace_ = kernels::cuda::DeviceBuffer(attention_bytes);
    }
    reserveSampleRows(limits.max_chunks);
    // Every GEMM of a captured decode step: the fused QKV and o_proj of M rows, and the LM head of M sampling rows.
    const int64_t H = c.hidden_size;
    const int64_t q = c.num_attention_heads * hd;
    const int64_t qkv = q + 2 * c.num_key_value_heads * hd;
    using kernels::cuda::GemmOutDType;
    for (const int64_t m : limits.graph_batch_sizes) {
        gemm_->prepare({m, qkv, H, H, qkv, GemmOutDType::kBf16, c.attention_bias});
        gemm_->prepare({m, H, q, q, H, GemmOutDType::kBf16, false});
        gemm_->prepare({m, c.vocab_size, H, H, c.vocab_size, GemmOutDType::kF32, false});
    }
}

void CudaOps::reserveSampleRows(int64_t rows) {
    if (rows <= sample_rows_) return;
    synchronize();  // a sample in flight may use the old buffers
    const SampleLayout layout = sampleLayout(rows);
    sample_params_host_ = kernels::cuda::PinnedBuffer(layout.bytes);
    sample_params_ = kernels::cuda::DeviceBuffer(layout.bytes);
    sample_ids_host_ = kernels::cuda::PinnedBuffer(static_cast<size_t>(rows) * sizeof(int32_t));
    sample_ids_ = kernels::cuda::DeviceBuffer(static_cast<size_t>(rows) * sizeof(int32_t));
    sample_rows_ = rows;
}

void CudaOps::sample(const Tensor& logits, std::span<const SampleRequest> requests, std::span<int32_t> tokens) {
    AFD_CHECK(logits.device() == device() && logits.dtype() == DType::kF32 && logits.dim() == 2,
              "CudaOps: sample logits must be [R, V] F32 on {}, got {} {} on {}", device().toString(),
              core::dtypeName(logits.dtype()), core::shapeToString(logits.shape()), logits.device().toString());
    const int64_t R = logits.size(0);
    const int64_t V = logits.size(1);
    AFD_CHECK(static_cast<int64_t>(requests.size()) == R && static_cast<int64_t>(tokens.size()) == R,
              "CudaOps: sample of {} rows with {} requests into {} tokens", R, requests.size(), tokens.size());
    if (R == 0) return;
    makeCurrent();
    // NOTE: reserve() sizes the buffers for the engine's steps; a larger call (outside an engine) grows them here.
    reserveSampleRows(R);
    kernels::SampleTokensParams p;
    p.num_rows = R;
    p.vocab_size = V;
    p.logits = logits.data<float>();
    p.out_ids = sample_ids_.as<int32_t>();
    const bool all_greedy = std::all_of(requests.begin(), requests.end(), [](const SampleRequest& r) {
        return !(r.params->temperature > 0.0f) || r.params->top_k == 1;
    });
    if (!all_greedy) {
        const SampleLayout layout = sampleLayout(R);
        auto* host = sample_params_host_.as<char>();
        auto* temperature = reinterpret_cast<float*>(host + layout.temperature);
        auto* top_p = reinterpret_cast<float*>(host + layout.top_p);
        auto* top_k = reinterpret_cast<int32_t*>(host + layout.top_k);
        auto* seed = reinterpret_cast<uint64_t*>(host + layout.seed);
        auto* offset = reinterpret_cast<uint64_t*>(host + layout.offset);
        for (int64_t r = 0; r < R; ++r) {
            const SampleRequest& req = requests[static_cast<size_t>(r)];
            temperature[r] = req.params->temperature;
            top_p[r] = req.params->top_p;
            top_k[r] =
                static_cast<int32_t>(std::clamp<int64_t>(req.params->top_k, 0, std::numeric_limits<int32_t>::max()));
            seed[r] = req.params->seed;
            // The sequence's own count of sampled tokens: its draws depend on nothing else in the batch.
            offset[r] = static_cast<uint64_t>(req.num_sampled);
        }
        AFD_CUDA_CHECK(cudaMemcpyAsync(sample_params_.get(), host, layout.bytes, cudaMemcpyHostToDevice, cudaStream()));
        auto* dev = sample_params_.as<char>();
        p.temperature = reinterpret_cast<const float*>(dev + layout.temperature);
        p.top_p = reinterpret_cast<const float*>(dev + layout.top_p);
        p.top_k = reinterpret_cast<const int32_t*>(dev + layout.top_k);
        p.seed = reinterpret_cast<const uint64_t*>(dev + layout.seed);
        p.offset = reinterpret_cast<const uint64_t*>(dev + layout.offset);
    }
    kernels::sampleTokensCuda(p, cudaStream());
    AFD_CUDA_CHECK(cudaMemcpyAsync(sample_ids_host_.as<int32_t>(), sample_ids_.get(),
                                   static_cast<size_t>(R) * sizeof(int32_t), cudaMemcpyDeviceToHost, cudaStream()));
    synchronize();
    std::memcpy(tokens.data(), sample_ids_host_.as<int32_t>(), static_cast<size_t>(R) * sizeof(int32_t));
}

core::Status CudaOps::captureGraph(int64_t key, const std::function<core::Status()>& enqueue) {
    makeCurrent();
    const cudaStream_t s = cudaStream();
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    AFD_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
    AFD_CHECK(capturing == cudaStreamCaptureStatusNone, "CudaOps: graph {} captured inside another capture", key);
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));
    size_t free_before = 0, total = 0;
    AFD_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    AFD_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    core::Status status;
    try {
        status = enqueue();
    } catch (...) {
        // End the capture before the error leaves: a stream left capturing refuses every later call.
        cudaGraph_t broken = nullptr;
        if (cudaStreamEndCapture(s, &broken) == cudaSuccess && broken != nullptr) (void)cudaGraphDestroy(broken);
        (void)cudaGetLastError();
        throw;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    if (!status.isOk() || ended != cudaSuccess) {
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        if (!status.isOk()) {
            (void)cudaGetLastError();
            return status;
        }
        AFD_CUDA_CHECK(ended);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    AFD_CUDA_CHECK(instantiated);
    kernels::cuda::GraphExec owned(exec);
    AFD_CUDA_CHECK(cudaGraphUpload(exec, s));  // the device copy now, not at the first replay
    AFD_CUDA_CHECK(cudaStreamSynchronize(s));
    size_t free_after = 0;
    AFD_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    if (free_before > free_after) graph_bytes_ += free_before - free_after;
    graphs_.insert_or_assign(key, std::move(owned));
    return core::Status::ok();
}

void CudaOps::replayGraph(int64_t key) {
    const auto it = graphs_.find(key);
    AFD_CHECK(it != graphs_.end(), "CudaOps: no graph {} was captured on {}", key, device().toString());
    makeCurrent();
    AFD_CUDA_CHECK(cudaGraphLaunch(it->second.get(), cudaStream()));
}

core::Result<std::unique_ptr<DeviceOps>> createCudaOps(int gpu) {
    const int visible = kernels::cuda::deviceCount();
    if (gpu < 0 || gpu >= visible) {
        return core::invalidArgument("cuda:{} is not a visible CUDA device ({} visible)", gpu, visible);
    }
    try {
        const kernels::cuda::DeviceInfo info = kernels::cuda::deviceInfo(gpu);
        if (info.compute_major != 9 || info.compute_minor != 0) {
            return core::unsupported("cuda:{} ({}) is sm_{}{}: the CUDA kernels are built for sm_90a (Hopper)", gpu,
                                     info.name, info.compute_major, info.compute_minor);
        }
        return std::unique_ptr<DeviceOps>(std::make_unique<CudaOps>(gpu));
    } catch (const core::Error& e) {
        return core::internalError("setting up the attention ops on cuda:{}: {}", gpu, e.what());
    }
}

}  // namespace afd::attention
