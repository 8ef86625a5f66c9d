// CpuOps: DeviceOps on the host with the CPU reference kernels (src/kernels/cpu), FP32 activations and KV cache.
// Every call runs to completion before it returns (the "stream" is the calling thread); synchronize() does nothing.
// Results equal the unfused reference kernels bit for bit (each op applies them in the same order on the same values).
// Parallel loops use the process thread pool.
//
// CpuPrecision::kBf16Activations makes the same engine a reference at the GPU engine's precision: values stay FP32 in
// memory, but each op rounds to bf16 what the CUDA ops store in bf16 (the normed activations, q, the KV cache, the
// attention output; the experts' h and y through the CPU MLP backend), so that the two engines differ by FP32
// rounding alone (summation order, exp) instead of by bf16 rounding.
#pragma once

#include <vector>

#include "attention/device_ops.h"

namespace afd::attention {

enum class CpuPrecision {
    kFp32,             // the reference: FP32 activations throughout
    kBf16Activations,  // rounded to bf16 where the GPU engine stores bf16
};

class CpuOps final : public DeviceOps {
public:
    explicit CpuOps(CpuPrecision precision = CpuPrecision::kFp32) : precision_(precision) {}
    CpuPrecision precision() const { return precision_; }

    core::Device device() const override { return core::Device::cpu(); }
    core::DType activationDType() const override { return core::DType::kF32; }
    void* stream() const override { return nullptr; }
    void reserve(const model::ModelConfig& config, const StepLimits& limits) override;

    core::Tensor empty(core::DType dtype, core::Shape shape) override;
    core::Tensor emptyHost(core::DType dtype, core::Shape shape) override;
    void copy(const core::Tensor& src, const core::Tensor& dst) override;
    void synchronize() override {}

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
    void sample(const core::Tensor& logits, std::span<const SampleRequest> requests,
                std::span<int32_t> tokens) override;

private:
    // Rounds `count` values at `data` to bf16 (kBf16Activations; nothing under kFp32).
    void roundActivations(float* data, int64_t count) const;

    CpuPrecision precision_;
    // Scratch reused across calls (sized by reserve; grown if a call needs more): normed-and-rotated k rows; the
    // per-row sequence and position arrays kernels::pagedAttentionCpu reads.
    std::vector<float> k_rows_;
    std::vector<float> biased_;  // qkv plus its bias (qkvRopeKvWrite)
    std::vector<int32_t> token_seq_;
    std::vector<int32_t> token_pos_;
};

}  // namespace afd::attention
