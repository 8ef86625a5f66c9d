#include "attention/cuda/device_weights.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/cuda/device_weights_layout.h"
#include "attention/cuda/staged_upload.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/device_random.h"
#include "kernels/moe_cuda.h"
#include "model/synthetic.h"

namespace afd::attention {
namespace {

using core::Status;
using core::Tensor;
using kernels::cuda::DeviceBuffer;
using kernels::cuda::Stream;
using model::ModelConfig;
using model::ModelWeights;
using model::WeightSelection;

double gib(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30); }

double secondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The weights' allocation, freed on its own GPU whichever is current when the last tensor goes.
class DeviceArena {
public:
    DeviceArena(int gpu, size_t bytes) : gpu_(gpu), buffer_(bytes) {}  // `gpu` is current
    ~DeviceArena() {
        int previous = 0;
        const bool restore = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(gpu_) == cudaSuccess;
        buffer_ = DeviceBuffer();
        if (restore) (void)cudaSetDevice(previous);
    }
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    void* get() const { return buffer_.get(); }

private:
    int gpu_;
    DeviceBuffer buffer_;
};

// Row-major experts of one MoE layer (or a dense MLP) on the device before packing: whole experts, at least one.
int64_t stagingExperts(int64_t num_experts, int64_t checkpoint_inter, int64_t hidden,
                       const DeviceWeightsOptions& options) {
    const auto per_expert = static_cast<uint64_t>(3 * checkpoint_inter * hidden) * sizeof(uint16_t);
    const auto fit = static_cast<int64_t>(options.device_staging_bytes / std::max<uint64_t>(per_expert, 1));
    return std::clamp<int64_t>(fit, 1, std::max<int64_t>(num_experts, 1));
}

// Elements of the largest attention tensor of a layer in the checkpoint, staged whole on the device before its heads
// are padded (0 when they are not).
int64_t paddedAttentionStagingElements(const ModelConfig& c, const DeviceWeightsLayout& layout) {
    const bool any_attention = std::any_of(layout.attention.begin(), layout.attention.end(),
                                           [](const AttentionLayerSlots& a) { return a.qkv_proj != kNoSlot; });
    if (!any_attention || !headRuns(c, 1, 1).padded()) return 0;
    return (c.qSize() + 2 * c.kvSize()) * c.hidden_size;  // qkv_proj, the largest
}

// Only the packed MLP layout has a requirement the padding does not lift (MLP widths are padded to the grouped GEMMs'
// unit, heads to a head_dim the attention kernels take; CudaOps refuses a head_dim it cannot store).
Status checkSupported(const ModelConfig& c, const DeviceWeightsLayout& layout) {
    for (size_t l = 0; l < layout.mlp.size(); ++l) {
        if (layout.mlp[l].numExperts() == 0) continue;
        if (c.hidden_size % 64 != 0) {
            return core::unsupported(
                "GPU weights pack the MLP weights for the grouped GEMMs: hidden_size must be a "
                "multiple of 64, got {}",
                c.hidden_size);
        }
    }
    return Status::ok();
}

// dst [runs, stored_elements] = src [runs, elements] (BF16, both device memory), zeros after each run; on `stream`.
void scatterRuns(const void* src, void* dst, const HeadRuns& r, cudaStream_t stream) {
    const size_t stored = static_cast<size_t>(r.stored_elements) * sizeof(uint16_t);
    const size_t width = static_cast<size_t>(r.elements) * sizeof(uint16_t);
    AFD_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(r.runs) * stored, stream));
    AFD_CUDA_CHECK(cudaMemcpy2DAsync(dst, stored, src, width, width, static_cast<size_t>(r.runs),
                                     cudaMemcpyDeviceToDevice, stream));
}

// Makes `gpu` current; an error naming it when it is not a visible device.
Status selectGpu(int gpu) {
    const int count = kernels::cuda::deviceCount();
    if (gpu < 0 || gpu >= count) {
        return core::invalidArgument("cuda:{} is not a visible CUDA device ({} visible)", gpu, count);
    }
    const cudaError_t err = cudaSetDevice(gpu);
    if (err != cudaSuccess) return core::internalError("cannot use cuda:{}: {}", gpu, cudaGetErrorString(err));
    return Status::ok();
}

struct DeviceModel {
    std::shared_ptr<DeviceArena> arena;
    ModelWeights weights;
};

DeviceModel allocateWeights(const ModelConfig& c, const DeviceWeightsLayout& layout, int gpu) {
    DeviceModel m;
    m.arena = std::make_shared<DeviceArena>(gpu, layout.total_bytes);
    m.weights = deviceWeightTensors(c, layout, m.arena->get(), core::Device::cuda(gpu), m.arena);
    m.weights.owned_bytes = layout.total_bytes;
    return m;
}

// --- Upload ---------------------------------------------------------------------------------------------------------

class Uploader {
public:
    Uploader(const ModelConfig& c, const DeviceWeightsOptions& options, cudaStream_t stream)
        : config_(c), options_(options), stream_(stream), staged_(options.host_staging_bytes, stream) {}

    // dst (device) = src (host), the same shape.
    Status put(const Tensor& src, const Tensor& dst, const std::string& what) {
        if (src.rawData() == nullptr && src.numel() > 0) return core::notFound("host weights have no {}", what);
        if (!src.device().isCpu() || src.dtype() != core::DType::kBf16 || src.shape() != dst.shape()) {
            return core::mismatch("host tensor {} is {} {} on {}, expected BF16 {} on the host", what,
                                  core::dtypeName(src.dtype()), core::shapeToString(src.shape()),
                                  src.device().toString(), core::shapeToString(dst.shape()));
        }
        staged_.copy(src.rawData(), dst.rawData(), dst.nbytes());
        return Status::ok();
    }

    // dst (device, heads of hs lanes) = src (host, the checkpoint's `shape`, heads of hd lanes) laid out as `runs`
    // says: through the device staging when the heads are padded, else put().
    Status putHeads(const Tensor& src, const core::Shape& shape, const Tensor& dst, const HeadRuns& runs,
                    const std::string& what) {
        if (!runs.padded()) return put(src, dst, what);
        if (src.rawData() == nullptr && src.numel() > 0) return core::notFound("host weights have no {}", what);
        if (!src.device().isCpu() || src.dtype() != core::DType::kBf16 || src.shape() != shape) {
            return core::mismatch("host tensor {} is {} {} on {}, expected BF16 {} on the host", what,
                                  core::dtypeName(src.dtype()), core::shapeToString(src.shape()),
                                  src.device().toString(), core::shapeToString(shape));
        }
        AFD_CHECK(runs.runs * runs.elements == src.numel() && runs.runs * runs.stored_elements == dst.numel(),
                  "device weights: {} has {} elements for {} runs of {} padded to {}", what, dst.numel(), runs.runs,
                  runs.elements, runs.stored_elements);
        void* staging = stagingOf(src.nbytes());
        staged_.copy(src.rawData(), staging, src.nbytes());
        scatterRuns(staging, dst.rawData(), runs, stream_);  // stream order: the next staging copy waits for it
        return Status::ok();
    }

    // Experts of one layer: row-major host w13 [E, 2I, H] / w2 [E, H, I] through the device staging, packed there at
    // the device's (packed) width.
    Status putExperts(const model::MlpLayerWeights& host, const model::MlpLayerWeights& dev, const std::string& what) {
        const int64_t E = dev.expert_end - dev.expert_begin;
        const int64_t H = config_.hidden_size;
        const int64_t I = host.inter;
        if (host.expert_begin != dev.expert_begin || host.expert_end != dev.expert_end ||
            kernels::moePackedWidth(I) != dev.inter) {
            return core::mismatch(
                "host {} holds experts [{}, {}) of width {}, expected [{}, {}) of a width packed at {}", what,
                host.expert_begin, host.expert_end, I, dev.expert_begin, dev.expert_end, dev.inter);
        }
        const core::Shape w13_shape{E, 2 * I, H};
        const core::Shape w2_shape{E, H, I};
        if (host.w13.shape() != w13_shape || host.w2.shape() != w2_shape || host.w13.rawData() == nullptr ||
            host.w2.rawData() == nullptr) {
            return core::mismatch("host {} experts are w13 {} / w2 {}, expected {} / {}", what,
                                  core::shapeToString(host.w13.shape()), core::shapeToString(host.w2.shape()),
                                  core::shapeToString(w13_shape), core::shapeToString(w2_shape));
        }
        const int64_t per13 = 2 * I * H;
        const int64_t per2 = H * I;
        const int64_t per13_packed = dev.w13.numel() / E;
        const int64_t per2_packed = dev.w2.numel() / E;
        const int64_t chunk = stagingExperts(E, I, H, options_);
        auto* staging13 =
            static_cast<core::Bf16*>(stagingOf(static_cast<size_t>(chunk * (per13 + per2)) * sizeof(uint16_t)));
        core::Bf16* staging2 = staging13 + chunk * per13;
        const auto* src13 = host.w13.data<core::Bf16>();
        const auto* src2 = host.w2.data<core::Bf16>();
        for (int64_t e0 = 0; e0 < E; e0 += chunk) {
            const int64_t n = std::min(chunk, E - e0);
            staged_.copy(src13 + e0 * per13, staging13, static_cast<size_t>(n * per13) * sizeof(uint16_t));
            staged_.copy(src2 + e0 * per2, staging2, static_cast<size_t>(n * per2) * sizeof(uint16_t));
            // Stream order: the next chunk's copies into the staging wait for this pack.
            kernels::moePackWeightsCuda(staging13, staging2, n, H, I, dev.w13.data<core::Bf16>() + e0 * per13_packed,
                                        dev.w2.data<core::Bf16>() + e0 * per2_packed, stream_);
        }
        return Status::ok();
    }

    void finish() { staged_.finish(); }
    uint64_t bytesCopied() const { return staged_.bytesCopied(); }

private:
    // The device staging, at least `bytes` of it.
    void* stagingOf(size_t bytes) {
        if (staging_.bytes() < bytes) {
            staged_.finish();  // the packs and pads enqueued so far still read the old staging
            staging_ = DeviceBuffer(bytes);
        }
        return staging_.get();
    }

    const ModelConfig& config_;
    const DeviceWeightsOptions& options_;
    cudaStream_t stream_;
    // Checkpoint tensors on the device before they are packed (experts) or padded (heads); outlives staged_, whose
    // destructor waits.
    DeviceBuffer staging_;
    StagedUpload staged_;
};

Status uploadAll(const ModelConfig& c, const ModelWeights& host, const ModelWeights& dev, Uploader& up) {
    if (dev.embed.rawData() != nullptr) {
        AFD_RETURN_IF_ERROR(up.put(host.embed, dev.embed, "model.embed_tokens.weight"));
        AFD_RETURN_IF_ERROR(up.put(host.final_norm, dev.final_norm, "model.norm.weight"));
        if (dev.lm_head.rawData() != dev.embed.rawData()) {
            AFD_RETURN_IF_ERROR(up.put(host.lm_head, dev.lm_head, "lm_head.weight"));
        }
    }
    if (host.attention.size() != dev.attention.size() || host.mlp.size() != dev.mlp.size()) {
        return core::mismatch("host weights have {} attention and {} MLP layers, the config {}", host.attention.size(),
                              host.mlp.size(), c.num_hidden_layers);
    }
    const int64_t H = c.hidden_size;
    const int64_t nh = c.num_attention_heads;
    const int64_t nkv = c.num_key_value_heads;
    const int64_t hd = c.head_dim;
    for (size_t l = 0; l < dev.attention.size(); ++l) {
        const model::AttentionLayerWeights& h = host.attention[l];
        const model::AttentionLayerWeights& d = dev.attention[l];
        const std::string p = model::layerPrefix(static_cast<int64_t>(l));
        if (d.qkv_proj.rawData() != nullptr) {
            AFD_RETURN_IF_ERROR(up.put(h.input_norm, d.input_norm, p + "input_layernorm.weight"));
            AFD_RETURN_IF_ERROR(up.put(h.post_norm, d.post_norm, p + "post_attention_layernorm.weight"));
            const HeadRuns norm = headRuns(c, 1, 1);
            AFD_RETURN_IF_ERROR(up.putHeads(h.q_norm, {hd}, d.q_norm, norm, p + "self_attn.q_norm.weight"));
            AFD_RETURN_IF_ERROR(up.putHeads(h.k_norm, {hd}, d.k_norm, norm, p + "self_attn.k_norm.weight"));
            AFD_RETURN_IF_ERROR(
                up.putHeads(h.o_proj, {H, nh * hd}, d.o_proj, headRuns(c, H * nh, 1), p + "self_attn.o_proj.weight"));
            // The host's fused copy when it has one (loadWeights builds it), else its three projections.
            if (h.qkv_proj.rawData() != nullptr) {
                AFD_RETURN_IF_ERROR(up.putHeads(h.qkv_proj, {(nh + 2 * nkv) * hd, H}, d.qkv_proj,
                                                headRuns(c, nh + 2 * nkv, H), p + "self_attn qkv_proj"));
            } else {
                AFD_RETURN_IF_ERROR(
                    up.putHeads(h.q_proj, {nh * hd, H}, d.q_proj, headRuns(c, nh, H), p + "self_attn.q_proj.weight"));
                AFD_RETURN_IF_ERROR(
                    up.putHeads(h.k_proj, {nkv * hd, H}, d.k_proj, headRuns(c, nkv, H), p + "self_attn.k_proj.weight"));
                AFD_RETURN_IF_ERROR(
                    up.putHeads(h.v_proj, {nkv * hd, H}, d.v_proj, headRuns(c, nkv, H), p + "self_attn.v_proj.weight"));
            }
            if (d.qkv_bias.rawData() != nullptr) {
                AFD_RETURN_IF_ERROR(up.put(h.o_bias, d.o_bias, p + "self_attn.o_proj.bias"));
                if (h.qkv_bias.rawData() != nullptr) {
                    AFD_RETURN_IF_ERROR(up.putHeads(h.qkv_bias, {(nh + 2 * nkv) * hd}, d.qkv_bias,
                                                    headRuns(c, nh + 2 * nkv, 1), p + "self_attn qkv_bias"));
                } else {
                    AFD_RETURN_IF_ERROR(
                        up.putHeads(h.q_bias, {nh * hd}, d.q_bias, headRuns(c, nh, 1), p + "self_attn.q_proj.bias"));
                    AFD_RETURN_IF_ERROR(
                        up.putHeads(h.k_bias, {nkv * hd}, d.k_bias, headRuns(c, nkv, 1), p + "self_attn.k_proj.bias"));
                    AFD_RETURN_IF_ERROR(
                        up.putHeads(h.v_bias, {nkv * hd}, d.v_bias, headRuns(c, nkv, 1), p + "self_attn.v_proj.bias"));
                }
            }
        }
        const model::MlpLayerWeights& hm = host.mlp[l];
        const model::MlpLayerWeights& dm = dev.mlp[l];
        if (dm.router.rawData() != nullptr) AFD_RETURN_IF_ERROR(up.put(hm.router, dm.router, p + "mlp.gate.weight"));
        if (dm.hasExperts()) AFD_RETURN_IF_ERROR(up.putExperts(hm, dm, p + "mlp"));
    }
    up.finish();
    return Status::ok();
}

// --- Random weights -------------------------------------------------------------------------------------------------

// Draws one tensor of the checkpoint plan (its HF name and shape) into `out` (device memory of its elements).
void drawInto(const std::string& name, const core::Shape& shape, core::Bf16* out, uint64_t seed, cudaStream_t stream) {
    const model::SyntheticDistribution dist = model::syntheticDistribution(name, shape);
    kernels::SyntheticFillParams p;
    p.out = out;
    p.count = core::shapeNumel(shape);
    p.key = model::syntheticTensorKey(name, seed);
    p.centre = dist.centre;
    p.half_width = dist.half_width;
    kernels::syntheticFillCuda(p, stream);
}

void drawTensor(const std::string& name, const core::Shape& shape, const Tensor& dst, uint64_t seed,
                cudaStream_t stream) {
    AFD_CHECK(core::shapeNumel(shape) == dst.numel(), "{}: {} elements, the device tensor has {}", name,
              core::shapeNumel(shape), dst.numel());
    drawInto(name, shape, dst.data<core::Bf16>(), seed, stream);
}

// An attention tensor of the checkpoint's `shape` into `dst`, its heads laid out as `runs` says: drawn into `staging`
// (device memory of the checkpoint tensor) and padded from there when the heads are padded.
void drawHeads(const std::string& name, const core::Shape& shape, const Tensor& dst, const HeadRuns& runs,
               uint64_t seed, cudaStream_t stream, const DeviceBuffer& staging) {
    if (!runs.padded()) {
        drawTensor(name, shape, dst, seed, stream);
        return;
    }
    AFD_CHECK(runs.runs * runs.elements == core::shapeNumel(shape) && runs.runs * runs.stored_elements == dst.numel() &&
                  staging.bytes() >= static_cast<size_t>(core::shapeNumel(shape)) * sizeof(uint16_t),
              "{}: {} elements padded into a device tensor of {}", name, core::shapeNumel(shape), dst.numel());
    drawInto(name, shape, staging.as<core::Bf16>(), seed, stream);
    scatterRuns(staging.get(), dst.rawData(), runs, stream);  // stream order: the next draw into staging waits
}

// The names of an MLP layer's gate/up/down tensors, expert by expert (a dense layer: its one MLP).
std::vector<std::string> mlpTensorNames(const model::MlpLayerWeights& m, int64_t layer) {
    std::vector<std::string> names;
    for (int64_t e = m.expert_begin; e < m.expert_end; ++e) {
        for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
            names.push_back(m.is_moe ? model::expertTensorName(layer, e, proj)
                                     : fmt::format("{}mlp.{}.weight", model::layerPrefix(layer), proj));
        }
    }
    return names;
}

// `keys` and `staging` are the caller's, so that they outlive the work enqueued on `stream` if this throws.
void drawAll(const ModelConfig& c, const DeviceWeightsLayout& layout, const ModelWeights& dev, uint64_t seed,
             cudaStream_t stream, DeviceBuffer& keys, DeviceBuffer& staging) {
    const int64_t H = c.hidden_size;
    const int64_t V = c.vocab_size;
    if (dev.embed.rawData() != nullptr) {
        drawTensor("model.embed_tokens.weight", {V, H}, dev.embed, seed, stream);
        drawTensor("model.norm.weight", {H}, dev.final_norm, seed, stream);
        if (dev.lm_head.rawData() != dev.embed.rawData())
            drawTensor("lm_head.weight", {V, H}, dev.lm_head, seed, stream);
    }
    const int64_t q = c.qSize();
    const int64_t kv = c.kvSize();
    const int64_t nh = c.num_attention_heads;
    const int64_t nkv = c.num_key_value_heads;
    staging = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(paddedAttentionStagingElements(c, layout), 1)) *
                           sizeof(uint16_t));
    // Every MLP layer's keys in one upload, before any kernel reads them.
    std::vector<uint64_t> host_keys;
    std::vector<size_t> key_offset(dev.mlp.size(), 0);
    for (size_t l = 0; l < dev.mlp.size(); ++l) {
        key_offset[l] = host_keys.size();
        for (const std::string& name : mlpTensorNames(dev.mlp[l], static_cast<int64_t>(l))) {
            host_keys.push_back(model::syntheticTensorKey(name, seed));
        }
    }
    keys = DeviceBuffer(std::max<size_t>(host_keys.size(), 1) * sizeof(uint64_t));
    AFD_CUDA_CHECK(
        cudaMemcpy(keys.get(), host_keys.data(), host_keys.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
    for (size_t l = 0; l < dev.attention.size(); ++l) {
        const model::AttentionLayerWeights& a = dev.attention[l];
        const std::string p = model::layerPrefix(static_cast<int64_t>(l));
        if (a.qkv_proj.rawData() != nullptr) {
            drawTensor(p + "input_layernorm.weight", {H}, a.input_norm, seed, stream);
            drawTensor(p + "post_attention_layernorm.weight", {H}, a.post_norm, seed, stream);
            const HeadRuns norm = headRuns(c, 1, 1);
            drawHeads(p + "self_attn.q_norm.weight", {c.head_dim}, a.q_norm, norm, seed, stream, staging);
            drawHeads(p + "self_attn.k_norm.weight", {c.head_dim}, a.k_norm, norm, seed, stream, staging);
            drawHeads(p + "self_attn.q_proj.weight", {q, H}, a.q_proj, headRuns(c, nh, H), seed, stream, staging);
            drawHeads(p + "self_attn.k_proj.weight", {kv, H}, a.k_proj, headRuns(c, nkv, H), seed, stream, staging);
            drawHeads(p + "self_attn.v_proj.weight", {kv, H}, a.v_proj, headRuns(c, nkv, H), seed, stream, staging);
            drawHeads(p + "self_attn.o_proj.weight", {H, q}, a.o_proj, headRuns(c, H * nh, 1), seed, stream, staging);
            if (a.qkv_bias.rawData() != nullptr) {
                drawHeads(p + "self_attn.q_proj.bias", {q}, a.q_bias, headRuns(c, nh, 1), seed, stream, staging);
                drawHeads(p + "self_attn.k_proj.bias", {kv}, a.k_bias, headRuns(c, nkv, 1), seed, stream, staging);
                drawHeads(p + "self_attn.v_proj.bias", {kv}, a.v_bias, headRuns(c, nkv, 1), seed, stream, staging);
                drawTensor(p + "self_attn.o_proj.bias", {H}, a.o_bias, seed, stream);
            }
        }
        const model::MlpLayerWeights& m = dev.mlp[l];
        if (m.router.rawData() != nullptr)
            drawTensor(p + "mlp.gate.weight", {c.num_experts, H}, m.router, seed, stream);
        if (!m.hasExperts()) continue;
        const std::vector<std::string> names = mlpTensorNames(m, static_cast<int64_t>(l));
        const int64_t I = layout.mlp[l].checkpoint_inter;  // m.inter is the packed width
        kernels::SyntheticPackedMlpParams mp;
        mp.num_experts = m.expert_end - m.expert_begin;
        mp.hidden = H;
        mp.inter = I;
        mp.keys = keys.as<uint64_t>() + key_offset[l];
        mp.gate_up_half_width = model::syntheticDistribution(names[0], {I, H}).half_width;
        mp.down_half_width = model::syntheticDistribution(names[2], {H, I}).half_width;
        mp.w13_packed = m.w13.data<core::Bf16>();
        mp.w2_packed = m.w2.data<core::Bf16>();
        kernels::syntheticPackedMlpCuda(mp, stream);
    }
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

uint64_t deviceWeightBytes(const ModelConfig& config, const WeightSelection& selection) {
    return planDeviceWeights(config, selection).total_bytes;
}

uint64_t deviceWeightLoadBytes(const ModelConfig& config, const WeightSelection& selection, WeightSource source,
                               const DeviceWeightsOptions& options) {
    const DeviceWeightsLayout layout = planDeviceWeights(config, selection);
    // Heads padded on the device: the largest attention tensor staged whole (both sources).
    const auto padded_staging =
        static_cast<uint64_t>(paddedAttentionStagingElements(config, layout)) * sizeof(uint16_t);
    uint64_t bytes = 0;
    for (size_t l = 0; l < layout.mlp.size(); ++l) {
        const MlpLayerSlots& m = layout.mlp[l];
        if (m.numExperts() == 0) continue;
        if (source == WeightSource::kRandom) {
            bytes += static_cast<uint64_t>(3 * m.numExperts()) * sizeof(uint64_t);  // the tensors' keys
        } else {
            const int64_t chunk = stagingExperts(m.numExperts(), m.checkpoint_inter, config.hidden_size, options);
            bytes = std::max(
                bytes, static_cast<uint64_t>(3 * chunk * m.checkpoint_inter * config.hidden_size) * sizeof(uint16_t));
        }
    }
    return source == WeightSource::kRandom ? bytes + padded_staging : std::max(bytes, padded_staging);
}

Status checkDeviceWeightsFit(const ModelConfig& config, const WeightSelection& selection, int gpu, WeightSource source,
                             uint64_t other_bytes, const DeviceWeightsOptions& options) {
    const DeviceWeightsLayout layout = planDeviceWeights(config, selection);
    AFD_RETURN_IF_ERROR(checkSupported(config, layout));
    AFD_RETURN_IF_ERROR(selectGpu(gpu));
    const uint64_t weights = layout.total_bytes;
    const uint64_t loading = deviceWeightLoadBytes(config, selection, source, options);
    const uint64_t needed = weights + loading + other_bytes;
    size_t free_bytes = 0, total_bytes = 0;
    std::string name;
    try {
        AFD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        name = kernels::cuda::deviceInfo(gpu).name;
    } catch (const core::Error& e) {
        return core::internalError("reading cuda:{}'s free memory: {}", gpu, e.what());
    }
    if (needed + kDeviceWeightsHeadroomBytes > free_bytes) {
        return core::invalidArgument(
            "cuda:{} ({}) has {:.2f} GiB ({} bytes) free of {:.2f} GiB, and the model needs {:.2f} GiB ({} bytes: "
            "weights {}, loading them {}, the rest {}) plus {:.2f} GiB of headroom: use a GPU with more free memory, "
            "fewer layers or a smaller KV cache",
            gpu, name, gib(free_bytes), free_bytes, gib(total_bytes), gib(needed), needed, weights, loading,
            other_bytes, gib(kDeviceWeightsHeadroomBytes));
    }
    return Status::ok();
}

WeightSelection selectionOf(const ModelConfig& config, const ModelWeights& host) {
    WeightSelection s{false, false, false, 0, 0};
    s.attention = host.embed.rawData() != nullptr;
    bool have_range = false;
    for (size_t l = 0; l < host.mlp.size(); ++l) {
        const model::MlpLayerWeights& m = host.mlp[l];
        if (m.is_moe) {
            s.router = s.router || m.router.rawData() != nullptr;
            if (m.hasExperts() && !have_range) {
                s.expert_begin = m.expert_begin;
                s.expert_end = m.expert_end;
                have_range = true;
            }
        } else {
            s.dense_mlp = s.dense_mlp || m.hasExperts();
        }
    }
    (void)config;
    return s;
}

core::Result<ModelWeights> uploadModelWeights(const ModelConfig& config, const ModelWeights& host, int gpu,
                                              const DeviceWeightsOptions& options, DeviceWeightsReport* report) {
    const auto start = std::chrono::steady_clock::now();
    const WeightSelection selection = selectionOf(config, host);
    AFD_RETURN_IF_ERROR(checkDeviceWeightsFit(config, selection, gpu, WeightSource::kHost, 0, options));
    const DeviceWeightsLayout layout = planDeviceWeights(config, selection);
    try {
        DeviceModel dev = allocateWeights(config, layout, gpu);
        uint64_t copied = 0;
        {
            Stream stream;
            Uploader up(config, options, stream.get());
            AFD_RETURN_IF_ERROR(uploadAll(config, host, dev.weights, up)
                                    .withContext(fmt::format("uploading the weights to cuda:{}", gpu)));
            copied = up.bytesCopied();
        }
        dev.weights.checkpoint_bytes = host.checkpoint_bytes;
        const double seconds = secondsSince(start);
        AFD_LOG_INFO("cuda:{}: {} bytes of weights in device memory, {} bytes uploaded in {:.2f} s ({:.2f} GB/s)", gpu,
                     layout.total_bytes, copied, seconds,
                     seconds > 0 ? static_cast<double>(copied) / seconds / 1e9 : 0.0);
        if (report != nullptr) *report = {layout.total_bytes, copied, seconds};
        return std::move(dev.weights);
    } catch (const core::Error& e) {
        return core::internalError("uploading the weights to cuda:{}: {}", gpu, e.what());
    }
}

core::Result<ModelWeights> randomModelWeights(const ModelConfig& config, uint64_t seed, int gpu) {
    return randomModelWeights(config, WeightSelection::everything(config), seed, gpu);
}

core::Result<ModelWeights> randomModelWeights(const ModelConfig& config, const WeightSelection& selection,
                                              uint64_t seed, int gpu, DeviceWeightsReport* report) {
    const auto start = std::chrono::steady_clock::now();
    if (selection.expert_begin < 0 || selection.expert_end < selection.expert_begin ||
        selection.expert_end > config.num_experts) {
        return core::invalidArgument("expert range [{}, {}) is not inside [0, {})", selection.expert_begin,
                                     selection.expert_end, config.num_experts);
    }
    AFD_RETURN_IF_ERROR(checkDeviceWeightsFit(config, selection, gpu, WeightSource::kRandom));
    const DeviceWeightsLayout layout = planDeviceWeights(config, selection);
    try {
        DeviceModel dev = allocateWeights(config, layout, gpu);
        {
            Stream stream;
            DeviceBuffer keys, staging;
            drawAll(config, layout, dev.weights, seed, stream.get(), keys, staging);
        }
        const double seconds = secondsSince(start);
        AFD_LOG_INFO("cuda:{}: {} bytes of random weights (seed {}) drawn in {:.2f} s", gpu, layout.total_bytes, seed,
                     seconds);
        if (report != nullptr) *report = {layout.total_bytes, 0, seconds};
        return std::move(dev.weights);
    } catch (const core::Error& e) {
        return core::internalError("drawing random weights on cuda:{}: {}", gpu, e.what());
    }
}

}  // namespace afd::attention
