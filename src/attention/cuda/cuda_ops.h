// CudaOps: DeviceOps on one GPU (Hopper) with the CUDA kernels (kernels/dense_cuda.h, paged_attention_cuda.h,
// sampling_cuda.h) and cuBLASLt GEMMs (kernels/cuda/blas/cublaslt_gemm.h). Activations and the KV cache are BF16, the
// residual stream and the logits FP32 (device_ops.h).
//
// Stream: the ops' own non-blocking stream on the GPU; every op and copy is enqueued on it and returns at once, except
// sample() and synchronize(), which wait, and copies between pageable host memory and the GPU, which the CUDA runtime
// makes wait for the host side. Each call makes the GPU current on the calling thread first.
// Memory: empty() tensors own a cudaMalloc allocation (freed on the GPU when the last view goes; std::bad_alloc when
// the GPU is out of memory), emptyHost() ones pinned host memory. copy() converts F32 <-> BF16 on the device (castCuda)
// through a fixed device scratch, in pieces when the copy is larger.
// Graphs: captureGraph records the stream (thread-local capture mode) into an instantiated, uploaded graph per key.
// Threads: one thread at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>

#include "attention/device_ops.h"
#include "core/status.h"
#include "kernels/cuda/blas/cublaslt_gemm.h"
#include "kernels/cuda/device_memory.h"

namespace afd::attention {

class CudaOps final : public DeviceOps {
public:
    // `gpu` must be a visible device (createCudaOps checks); it is made current on the calling thread.
    explicit CudaOps(int gpu);
    ~CudaOps() override;

    core::Device device() const override { return core::Device::cuda(gpu_); }
    core::DType activationDType() const override { return core::DType::kBf16; }
    void* stream() const override { return stream_.get(); }
    // Checks that the kernels take the model (head_dim, block size …; core::Error naming the field), sizes the
    // attention workspace and the sampling buffers, and prepares the GEMM algorithms of the graph batch sizes.
    void reserve(const model::ModelConfig& config, const StepLimits& limits) override;
    // kernels::pagedAttentionHeadDim: head_dim 8 is stored at 16, for instance.
    int64_t storedHeadDim(int64_t head_dim) const override;

    core::Tensor empty(core::DType dtype, core::Shape shape) override;
    core::Tensor emptyHost(core::DType dtype, core::Shape shape) override;
    void copy(const core::Tensor& src, const core::Tensor& dst) override;
    void synchronize() override;

    void embedding(const core::Tensor& ids, const core::Tensor& table, const core::Tensor& out) override;
    void addRmsNorm(const core::Tensor& residual, const core::Tensor* delta, const core::Tensor* bias,
                    const core::Tensor& weight, float eps, const core::Tensor& out) override;
    void rmsNormRows(const core::Tensor& residual, const core::Tensor& rows, const core::Tensor& weight, float eps,
                     const core::Tensor& out) override;
    void linear(const core::Tensor& x, const core::Tensor& w, const core::Tensor* bias, const core::Tensor& y) override;
    void qkvRopeKvWrite(const core::Tensor& qkv, const core::Tensor* qkv_bias, const core::Tensor& q_norm,
                        const core::Tensor& k_norm, float eps, const RopeTable& rope, const core::Tensor& positions,
                        const core::Tensor& slot_mapping, const core::Tensor& k_cache, const core::Tensor& v_cache,
                        const core::Tensor& q_out) override;
    void attention(const core::Tensor& q, const core::Tensor& k_cache, const core::Tensor& v_cache,
                   const AttentionChunks& chunks, float scale, const core::Tensor& out) override;
    // Per row: temperature, top_k, top_p, the request's seed and the offset num_sampled (the draw of a seeded request
    // depends on nothing else in the batch), uploaded in one copy unless every row is greedy; then
    // kernels::sampleTokensCuda, and the ids back through pinned memory.
    void sample(const core::Tensor& logits, std::span<const SampleRequest> requests,
                std::span<int32_t> tokens) override;

    bool supportsGraphs() const override { return true; }
    core::Status captureGraph(int64_t key, const std::function<core::Status()>& enqueue) override;
    void replayGraph(int64_t key) override;
    int64_t numGraphs() const override { return static_cast<int64_t>(graphs_.size()); }
    uint64_t graphMemoryBytes() const override { return graph_bytes_; }

    int gpu() const { return gpu_; }
    kernels::cuda::CublasLtGemm& gemm() { return *gemm_; }

private:
    void makeCurrent() const;
    cudaStream_t cudaStream() const { return stream_.get(); }
    // A conversion between host and device memory (one side host, one on this GPU), through scratch_.
    void convertAcross(const core::Tensor& src, const core::Tensor& dst);
    void reserveSampleRows(int64_t rows);

    int gpu_;
    kernels::cuda::Stream stream_;
    std::unique_ptr<kernels::cuda::CublasLtGemm> gemm_;
    kernels::cuda::DeviceBuffer scratch_;  // conversions between the host and the device
    // Paged attention's split partials (decode), sized by reserve().
    kernels::cuda::DeviceBuffer attention_workspace_;
    // Sampling: per-row parameters (host staging and device copy, one layout), and the ids.
    int64_t sample_rows_ = 0;
    kernels::cuda::PinnedBuffer sample_params_host_;
    kernels::cuda::DeviceBuffer sample_params_;
    kernels::cuda::PinnedBuffer sample_ids_host_;
    kernels::cuda::DeviceBuffer sample_ids_;
    std::map<int64_t, kernels::cuda::GraphExec> graphs_;
    uint64_t graph_bytes_ = 0;
};

// CudaOps on cuda:gpu after checking that the GPU is visible: invalidArgument "cuda:N is not a visible CUDA device (M
// visible)" when it is not.
core::Result<std::unique_ptr<DeviceOps>> createCudaOps(int gpu);

}  // namespace afd::attention
