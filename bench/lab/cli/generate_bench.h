// `afd bench generate`: the dense GPU engine (attention/attention_rank.h: every layer on one GPU, CUDA graphs for
// decode unless --enforce-eager) on a config with random weights drawn on the device, timed as a server runs it: each
// engine step from the host (schedule, upload, graph replay or eager run, sampling until the ids are on the host) by
// the wall clock, and stated against its floor measured in the same run (lab/decode_floor.h):
//   decode point (batch B, context C): B requests of C random prompt tokens are prefilled (chunked, the engine's own
//     continuous batching), then, once every sequence decodes, warm-up steps and timed steps of exactly B decode rows;
//     the floor is the bytes the step reads (the experts its routing touches, counted from the router's top-k ids of
//     the B decode rows in one probe step after the timed ones, or the uniform-routing expectation where the probe
//     could not record, as the row says) over the copy bandwidth;
//   prefill point: one request of P random tokens in one step (its first token sampled), against the FLOPs over the
//     BF16 GEMM rate of an 8192^3 cuBLASLt GEMM (kernels/cuda/blas/cublaslt_gemm.h, the engine's GEMM class).
// The sequences decoded a few tokens before the timed steps (those of the earliest prefills more): each row states the
// mean KV length per sequence over its timed steps, which the KV bytes of the floor use.
#pragma once

#if defined(AFD_HAVE_CUDA_ATTENTION)

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cli/model_source.h"
#include "core/status.h"
#include "transport/afd_config.h"

namespace afd::lab {

struct GenerateBenchOptions {
    std::vector<std::pair<int64_t, int64_t>> points;  // (batch, context) decode points, in order
    int64_t prefill_tokens = 8192;                    // 0: no prefill point
    int prefill_reps = 3;
    int steps = 32;        // timed decode steps per point
    int warmup_steps = 8;  // decode steps before them, once every sequence decodes
    int64_t block_size = 16;
    int64_t max_num_batched_tokens = 8192;  // the engine's step budget (the prefill chunk size)
    bool enforce_eager = false;
    int64_t cuda_graph_max_batch_size = 0;  // 0: the engine's default
    double warmup_ms = 300.0;               // before each rate measurement (lab/bench_result.h)
    uint64_t seed = 1;                      // prompt tokens (the weights' seed is the source's)
    // Time one AFD attention rank instead of the dense engine: its FFN ranks (`afd ffn --random-weights` with the
    // same config and seed) serve the MLPs; the floor is the dense one.
    std::optional<transport::AfdConfig> afd;
    bool dual_batch_overlap = false;  // two-stage steps (the AFD rank's DBO)
};

struct GenerateBenchRow {
    std::string kind;  // "decode" or "prefill"
    int64_t batch = 0;
    int64_t context = 0;      // decode: the prompt length; prefill: the tokens
    double mean_context = 0;  // decode: mean KV positions read per sequence over the timed steps
    int steps = 0;            // timed steps (prefill: repetitions)
    double median_ms = 0;
    double p10_ms = 0;
    double p90_ms = 0;
    double mean_ms = 0;
    double tokens_per_s = 0;       // decode: B / median step; prefill: P / median step
    double experts_per_layer = 0;  // decode: mean distinct experts per MoE layer the floor counts
    double experts_uniform = 0;    // decode: the uniform-routing expectation
    std::string experts_source;    // "measured" (the probe step's top-k ids) or "uniform"
    double expert_bytes = 0;
    double weight_bytes = 0;  // attention, routers, dense MLP, LM head
    double kv_bytes = 0;
    double floor_bytes = 0;
    double floor_ms = 0;         // decode: floor_bytes / copy bandwidth; prefill: FLOPs / GEMM rate
    double pct_of_floor = 0;     // 100 floor / median
    double tflops = 0;           // prefill: achieved
    bool all_steps_pure = true;  // decode: every timed step had exactly B decode rows
};

struct GenerateBenchResult {
    std::string device;
    std::string model;  // what it ran: the source and its shape
    double copy_tbps = 0;
    double gemm_tflops = 0;
    double weight_gb = 0;
    std::string graphs;  // "eager" or the captured batch sizes
    std::string engine;  // "dense engine" or "AFD attention rank (cuda_ipc m2n 1A2F)"
    std::vector<GenerateBenchRow> rows;
};

// Runs every point on cuda:0 with `source`'s config and random weights; errors name what failed (no GPU, memory, a
// step).
core::Result<GenerateBenchResult> runGenerateBench(const GenerateBenchOptions& options, cli::ModelSource source);

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA_ATTENTION
