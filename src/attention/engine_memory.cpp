#include "attention/engine_memory.h"

#include <algorithm>

#include "core/logging.h"
#if defined(AFD_HAVE_CUDA_ATTENTION)
#include <cuda_runtime.h>

#include "kernels/moe_cuda.h"
#include "kernels/paged_attention_cuda.h"
#endif

namespace afd::attention {
namespace {

double gib(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30); }

// The head_dim the GPU engine stores heads at (CudaOps::storedHeadDim), which a small model's head_dim may pad.
int64_t gpuHeadDim(const model::ModelConfig& c) {
#if defined(AFD_HAVE_CUDA_ATTENTION)
    return kernels::pagedAttentionHeadDim(c.head_dim);
#else
    return c.head_dim;
#endif
}

int64_t blocksPerSequence(const EngineOptions& options) {
    return (options.scheduler.max_model_len + options.block_size - 1) / options.block_size;
}

}  // namespace

uint64_t engineWorkspaceBytes(const model::ModelConfig& c, const EngineOptions& options) {
    const auto T = static_cast<uint64_t>(options.scheduler.max_num_batched_tokens);
    const auto R =
        static_cast<uint64_t>(std::min(options.scheduler.max_num_seqs, options.scheduler.max_num_batched_tokens));
    const auto H = static_cast<uint64_t>(c.hidden_size);
    const auto V = static_cast<uint64_t>(c.vocab_size);
    const int64_t hd = gpuHeadDim(c);
    const auto q = static_cast<uint64_t>(c.num_attention_heads * hd);
    const auto qkv = q + 2 * static_cast<uint64_t>(c.num_key_value_heads * hd);
    const auto K = static_cast<uint64_t>(std::max<int64_t>(c.num_experts_per_tok, 1));
    const auto inter = static_cast<uint64_t>(std::max(c.moe_intermediate_size, c.intermediate_size));
    // The runner: residual (FP32), normed / o_proj / MLP out (BF16), QKV, q and the attention output; the final norm
    // and FP32 logits of the rows that sample.
    const uint64_t runner = T * (4 * H + 3 * 2 * H + 2 * qkv + 2 * 2 * q) + R * (2 * H + 4 * V);
    // The MoE layer's rows: permuted inputs, the gate-up output, FP32 partial outputs of every routing entry.
    uint64_t moe = T * K * (2 * H + 2 * 2 * inter + 4 * H);
#if defined(AFD_HAVE_CUDA_ATTENTION)
    if (c.num_experts > 0) {
        moe = std::max<uint64_t>(
            moe, kernels::moeCudaWorkspaceBytes(static_cast<int64_t>(T), c.num_experts_per_tok, c.num_experts,
                                                c.hidden_size, kernels::moePackedWidth(c.moe_intermediate_size)));
    }
#endif
    // Split-context decode attention: up to 64 partial outputs (and their max / sum) per query head and row.
    const uint64_t attention = R * static_cast<uint64_t>(c.num_attention_heads) * (hd + 2) * 4 * 64;
    // cuBLASLt workspace, step metadata, the decode graphs and whatever the CUDA runtime adds as it runs.
    constexpr uint64_t kFixed = uint64_t{1} << 30;
    return (runner + moe + attention) / 4 * 5 + kFixed;
}

uint64_t kvBytesPerToken(const model::ModelConfig& c, core::DType dtype) {
    return 2 * static_cast<uint64_t>(c.num_hidden_layers * c.num_key_value_heads * gpuHeadDim(c)) *
           core::dtypeSize(dtype);
}

uint64_t minimumKvBytes(const model::ModelConfig& config, const EngineOptions& options, bool kv_given) {
    const uint64_t block_bytes =
        kvBytesPerToken(config, core::DType::kBf16) * static_cast<uint64_t>(options.block_size);
    const auto one_sequence = static_cast<uint64_t>(blocksPerSequence(options)) * block_bytes;
    if (!kv_given) return one_sequence;
    if (options.num_kv_blocks > 0) return static_cast<uint64_t>(options.num_kv_blocks) * block_bytes;
    const uint64_t all_sequences = one_sequence * static_cast<uint64_t>(options.scheduler.max_num_seqs);
    return std::max(one_sequence, std::min(all_sequences, options.kv_cache_bytes / block_bytes * block_bytes));
}

core::Result<GpuMemory> gpuMemory(int gpu) {
#if defined(AFD_HAVE_CUDA_ATTENTION)
    cudaError_t err = cudaSetDevice(gpu);
    size_t free_bytes = 0, total_bytes = 0;
    if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (err != cudaSuccess) {
        return core::internalError("reading cuda:{}'s free memory: {}", gpu, cudaGetErrorString(err));
    }
    return GpuMemory{free_bytes, total_bytes};
#else
    return core::invalidArgument("cuda:{}: this afd was built without the CUDA backend", gpu);
#endif
}

core::Status sizeGpuKvCache(const model::ModelConfig& config, int gpu, double gpu_memory_utilization,
                            EngineOptions& options) {
    if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
        return core::invalidArgument("--gpu-memory-utilization {} must be in (0, 1]", gpu_memory_utilization);
    }
    AFD_ASSIGN_OR_RETURN(const GpuMemory memory, gpuMemory(gpu));
    const uint64_t in_use = memory.total_bytes - memory.free_bytes;
    const auto allowed = static_cast<uint64_t>(gpu_memory_utilization * static_cast<double>(memory.total_bytes));
    const uint64_t workspaces = engineWorkspaceBytes(config, options);
    const uint64_t taken = in_use + workspaces;
    const uint64_t budget = allowed > taken ? allowed - taken : 0;
    const uint64_t needed = minimumKvBytes(config, options, false);
    if (budget < needed) {
        return core::invalidArgument(
            "cuda:{}: --gpu-memory-utilization {} allows {:.2f} GiB of its {:.2f} GiB; {:.2f} GiB are in use (the "
            "weights among them) and the engine's workspaces take about {:.2f} GiB, which leaves {:.2f} GiB for the "
            "KV cache, less than one sequence of --max-model-len {} needs ({:.2f} GiB): raise "
            "--gpu-memory-utilization, or lower --max-model-len or --max-num-batched-tokens",
            gpu, gpu_memory_utilization, gib(allowed), gib(memory.total_bytes), gib(in_use), gib(workspaces),
            gib(budget), options.scheduler.max_model_len, gib(needed));
    }
    options.kv_cache_bytes = budget;
    options.num_kv_blocks = 0;
    AFD_LOG_INFO("cuda:{}: KV cache budget {:.2f} GiB ({} token positions) of --gpu-memory-utilization {}", gpu,
                 gib(budget), budget / kvBytesPerToken(config, core::DType::kBf16), gpu_memory_utilization);
    return core::Status::ok();
}

}  // namespace afd::attention
