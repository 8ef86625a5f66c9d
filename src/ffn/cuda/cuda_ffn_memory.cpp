// The GPU FFN compute's device memory, from the config alone (cuda_ffn_compute.h: cudaFfnDeviceBytes,
// checkCudaFfnFits), known before any weight is read.
#include "ffn/cuda/cuda_ffn_compute_impl.h"

namespace afd::ffn {

using cuda_ffn::bucketFor;
using cuda_ffn::bucketsUpTo;
using cuda_ffn::gib;
using cuda_ffn::gpuRouterTakes;

namespace {

// What a rank holding `selection`'s MLP weights puts on its GPU, layer by layer (as init() allocates it).
struct RankDeviceShape {
    uint64_t weights = 0;  // packed experts, and the routers run on the GPU
    uint64_t staging = 0;  // one layer's checkpoint matrices at a time (init's upload)
    bool routes = false;
    bool counts = false;  // p2p MoE layers: the per-expert routing counters
    int64_t max_experts = 1;
    int64_t max_inter = 1;  // the packed width (kernels::moePackedWidth)
};

RankDeviceShape rankDeviceShape(const model::ModelConfig& config, const model::WeightSelection& selection) {
    const int64_t H = config.hidden_size;
    RankDeviceShape r;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const bool moe = config.isMoeLayer(l);
        const int64_t experts = moe ? selection.numExperts() : (selection.dense_mlp ? 1 : 0);
        if (experts <= 0) continue;
        const int64_t inter = moe ? config.moe_intermediate_size : config.intermediate_size;
        const kernels::MoePackedWeightBytes packed = kernels::moePackedWeightBytes(experts, H, inter);
        r.weights += packed.w13 + packed.w2;
        r.staging = std::max(r.staging, static_cast<uint64_t>(experts * 3 * inter * H) * sizeof(uint16_t));
        r.counts = r.counts || (moe && selection.router);
        if (moe && selection.router && gpuRouterTakes(config)) {
            r.weights += static_cast<uint64_t>(config.num_experts * H) * sizeof(uint16_t);
            r.routes = true;
        }
        r.max_experts = std::max(r.max_experts, experts);
        r.max_inter = std::max(r.max_inter, kernels::moePackedWidth(inter));
    }
    return r;
}

}  // namespace

uint64_t cudaFfnDeviceBytes(const model::ModelConfig& config, const model::WeightSelection& selection,
                            int64_t max_rows) {
    const int64_t H = config.hidden_size;
    const int64_t K = config.num_experts_per_tok;
    const RankDeviceShape r = rankDeviceShape(config, selection);
    const int64_t rows = bucketFor(max_rows);
    uint64_t calls = static_cast<uint64_t>(rows * H) * (sizeof(uint16_t) + sizeof(float)) +  // x, out
                     static_cast<uint64_t>(rows * K) * (sizeof(int32_t) + sizeof(float)) +   // ids, weights
                     kernels::moeCudaWorkspaceBytes(rows, K, r.max_experts, H, r.max_inter);
    if (r.routes) calls += kernels::routerCudaWorkspaceBytes(rows, H, config.num_experts);
    if (r.counts) calls += 2 * static_cast<uint64_t>(config.num_experts) * sizeof(uint64_t) + sizeof(int32_t);
    return r.weights + r.staging + calls;
}

core::Status checkCudaFfnFits(const model::ModelConfig& config, const model::WeightSelection& selection, int gpu,
                              int64_t max_rows) {
    // The kernels index rows of x, x_sorted, h and y with 32-bit element offsets (moeForwardCuda): the largest token
    // bucket this rank stages must keep T top_k max(hidden, inter) below 2^31.
    const int64_t K = config.num_experts_per_tok;
    const int64_t widest = std::max(config.hidden_size, rankDeviceShape(config, selection).max_inter);
    const int64_t rows = bucketFor(max_rows);
    if (rows * K * widest >= (int64_t{1} << 31)) {
        int64_t limit = 0;  // the largest token bucket within the offsets
        for (const int64_t b : bucketsUpTo(rows)) {
            if (b * K * widest < (int64_t{1} << 31)) limit = b;
        }
        return core::invalidArgument(
            "this FFN rank stages calls of up to {} rows (its attention peers x afd.max_num_tokens, rounded up to a "
            "token bucket), and {} rows x top_k {} x {} columns pass the GPU kernels' 32-bit offsets (2^31 "
            "elements): lower afd.max_num_tokens so that a call carries at most {} rows",
            max_rows, rows, K, widest, limit);
    }
    const uint64_t needed = cudaFfnDeviceBytes(config, selection, max_rows);
    size_t free_bytes = 0, total_bytes = 0;
    std::string name;
    try {
        AFD_CUDA_CHECK(cudaSetDevice(gpu));
        AFD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        name = kernels::cuda::deviceInfo(gpu).name;
    } catch (const core::Error& e) {
        return core::internalError("reading cuda:{}'s free memory: {}", gpu, e.what());
    }
    if (needed + kCudaFfnHeadroomBytes > free_bytes) {
        return core::invalidArgument(
            "cuda:{} ({}) has {:.2f} GiB free of {:.2f} GiB, and this FFN rank needs {:.2f} GiB ({} experts of {} "
            "per MoE layer, calls of up to {} rows) plus {:.2f} GiB of headroom: use more FFN ranks "
            "(afd.num_ffn_ranks), fewer tokens per step (afd.max_num_tokens) or a GPU with more free memory",
            gpu, name, gib(free_bytes), gib(total_bytes), gib(needed), selection.numExperts(), config.num_experts,
            max_rows, gib(kCudaFfnHeadroomBytes));
    }
    return core::Status::ok();
}

}  // namespace afd::ffn
