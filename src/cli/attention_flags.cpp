#include "cli/attention_flags.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>

#include "attention/weights_loading.h"
#include "transport/afd_config.h"
#include "transport/connector_factory.h"

namespace afd::cli {

void addAttentionModelAndDeviceFlags(CLI::App& cmd, AttentionFlags& flags, const std::string& seed_flag) {
    addModelFlags(cmd, flags.model, seed_flag);
    cmd.add_option("--device", flags.device.device, "cpu or cuda (the GPU of --device-ids)")
        ->default_val("cpu")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd.add_option("--device-ids", flags.device.device_ids,
                   "GPUs indexed by the attention rank, as afd ffn's (default: the rank's own index; 0 without AFD)");
    cmd.add_option("--dtype", flags.dtype,
                   "activation precision of the dense engine: auto (float32 on the CPU, bfloat16 on a GPU), float32, "
                   "or bfloat16 (on the CPU: rounded to bf16 where the GPU engine stores bf16, a reference at its "
                   "precision)")
        ->default_val("auto")
        ->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
    cmd.add_flag("--enforce-eager", flags.engine.enforce_eager, "no CUDA graphs: every decode step runs eagerly");
    cmd.add_option("--cuda-graph-max-batch-size", flags.engine.cuda_graph_max_batch_size,
                   "decode steps of more sequences run eagerly (0: up to --max-num-seqs)")
        ->default_val(0)
        ->check(CLI::NonNegativeNumber);
    cmd.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                   "cuda: the fraction of the GPU's memory for weights, KV cache and workspaces; the KV cache gets "
                   "what is left (unless --kv-cache-mb or --num-kv-blocks)")
        ->default_val(0.9)
        ->check(CLI::Range(0.01, 1.0));
}

void addEngineLimitFlags(CLI::App& cmd, AttentionFlags& flags) {
    cmd.add_option("--max-num-seqs", flags.engine.scheduler.max_num_seqs, "sequences per step")->default_val(64);
    cmd.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                   "tokens per step, prefill chunked to fit (default 2048, at most afd.max_num_tokens under AFD)");
    cmd.add_option("--max-model-len", flags.engine.scheduler.max_model_len,
                   "longest prompt + output (default: min(max_position_embeddings, 8192))");
    cmd.add_option("--block-size", flags.engine.block_size, "KV cache block size in tokens")->default_val(16);
    cmd.add_option("--num-kv-blocks", flags.engine.num_kv_blocks,
                   "KV cache blocks (0 = enough for max-num-seqs full-length sequences within the KV budget)")
        ->default_val(0);
    cmd.add_option_function<uint64_t>(
           "--kv-cache-mb",
           [&flags](uint64_t mb) {
               flags.engine.kv_cache_bytes = mb << 20;
               flags.kv_cache_mb_given = true;
           },
           "KV cache budget in MiB when --num-kv-blocks is 0 (default: 1024 on the CPU; on a GPU what "
           "--gpu-memory-utilization leaves)")
        ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
    cmd.add_flag("--dbo,--enable-dbo", flags.engine.dual_batch_overlap, "split each step into two stages");
}

void addAfdFlags(CLI::App& cmd, AttentionFlags& flags) {
    cmd.add_option("--additional-config", flags.additional_config,
                   "JSON with an \"afd\" object: run as one attention rank of an AFD deployment");
    cmd.add_option("--afd-config", flags.afd_config_file, "a file holding the AFD config (instead of the flag)");
    cmd.add_option("--attention-rank", flags.attention_rank, "this process's attention rank (AFD)")->default_val(0);
}

core::Result<AttentionSetup> resolveAttentionFlags(const AttentionFlags& flags) {
    auto afd = transport::resolveAfdConfig(flags.additional_config, flags.afd_config_file, transport::Role::kAttention);
    if (!afd.isOk()) return core::invalidArgument("{}", afd.status().message());  // a config problem: exit code 2
    if (*afd && (flags.attention_rank < 0 || flags.attention_rank >= (*afd)->num_attention_ranks)) {
        return core::invalidArgument("--attention-rank {} must be in [0, afd.num_attention_ranks={})",
                                     flags.attention_rank, (*afd)->num_attention_ranks);
    }
    const int rank = *afd ? flags.attention_rank : 0;
    AFD_ASSIGN_OR_RETURN(
        const core::Device device,
        resolveDevice(flags.device, rank, *afd ? fmt::format("attention rank {}", rank) : "the dense engine"));
    // The connector kind is checked against this build and the device before the model is opened.
    if (*afd) AFD_RETURN_IF_ERROR(transport::checkConnectorUsable(**afd, transport::Role::kAttention, device));
    AttentionSetup setup;
    AFD_ASSIGN_OR_RETURN(setup.source, openModelSource(flags.model));
    AFD_RETURN_IF_ERROR(attention::checkWeightsDevice(setup.source, device));
    attention::AttentionRankOptions& o = setup.options;
    o.engine = flags.engine;
    if (o.engine.scheduler.max_model_len <= 0) {
        o.engine.scheduler.max_model_len = std::min<int64_t>(setup.source.config.max_position_embeddings, 8192);
    }
    o.engine.scheduler.max_num_batched_tokens =
        flags.max_num_batched_tokens.value_or(attention::defaultMaxNumBatchedTokens(*afd));
    AFD_RETURN_IF_ERROR(o.engine.validate());
    o.device = device;
    o.gpu.gpu_memory_utilization = flags.gpu_memory_utilization;
    o.gpu.kv_given = flags.kvGiven();
    if (*afd) {
        // The MLP/MoE blocks go to the FFN ranks through the connector; the m2n router and dense MLP layers run here.
        o.afd = **afd;
        o.attention_rank = flags.attention_rank;
        return setup;
    }
    if (flags.dtype == "float32" && !device.isCpu()) {
        return core::invalidArgument("--dtype float32: {} computes in bfloat16 (float32 activations run on the CPU)",
                                     device.toString());
    }
    o.cpu_precision =
        flags.dtype == "bfloat16" ? attention::CpuPrecision::kBf16Activations : attention::CpuPrecision::kFp32;
    return setup;
}

}  // namespace afd::cli
