#include "lab/cli/generate_bench.h"

#if defined(AFD_HAVE_CUDA_ATTENTION)

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "attention/attention_rank.h"
#include "attention/engine.h"
#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/blas/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "lab/bench_timing.h"
#include "lab/cli/routing_probe.h"
#include "lab/decode_floor.h"

namespace afd::lab {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void summarize(std::vector<double> ms, GenerateBenchRow& row) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
    row.median_ms = at(0.5);
    row.p10_ms = at(0.1);
    row.p90_ms = at(0.9);
    row.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
    row.steps = static_cast<int>(ms.size());
}

// BF16 GEMM rate (TFLOP/s) of y[n, n] = x[n, n] · w[n, n]^T at n = 8192 through the engine's cuBLASLt class, on random
// data, after warmup_ms of it.
double measureCublasLtGemmTflops(int gpu, cudaStream_t stream, double warmup_ms) {
    constexpr int64_t n = 8192;
    const size_t count = static_cast<size_t>(n) * n;
    DeviceMemory x(count * 2), w(count * 2), y(count * 2);
    fillRandom(x.get(), count, 5, 1.0f, stream);
    fillRandom(w.get(), count, 6, 1.0f, stream);
    kernels::cuda::CublasLtGemm gemm(gpu);
    kernels::cuda::GemmParams p;
    p.m = n;
    p.n = n;
    p.k = n;
    p.x = static_cast<const core::Bf16*>(x.get());
    p.ldx = n;
    p.w = static_cast<const core::Bf16*>(w.get());
    p.y = y.get();
    p.ldy = n;
    gemm.prepare(p.shape());
    const Timing t = timeRuns(
        stream, 3, 20, [&](int) { gemm.matmul(p, stream); }, warmup_ms);
    return 2.0 * static_cast<double>(n) * n * n / (t.median_us * 1e-6) / 1e12;
}

// Decode tokens a request needs beyond its prompt: the steps of the whole batch's prefill (a sequence prefilled early
// decodes meanwhile), the warm-up, the timed steps, the probe step, and a margin.
int64_t decodeTokensNeeded(int64_t batch, int64_t context, int64_t budget, const GenerateBenchOptions& o) {
    const int64_t per_step = budget - batch;  // prefill tokens a step holds beside every decode row
    const int64_t prefill_steps = (batch * context + per_step - 1) / per_step + (context + per_step - 1) / per_step;
    return prefill_steps + o.warmup_steps + o.steps + 4;
}

std::vector<int32_t> randomPrompt(std::mt19937_64& rng, int64_t length, int64_t vocab) {
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(length));
    for (auto& t : prompt) t = token(rng);
    return prompt;
}

class Bench {
public:
    Bench(const GenerateBenchOptions& o, attention::AttentionRank& dense, RoutingProbe& probe, double copy_tbps,
          double gemm_tflops)
        : o_(o),
          engine_(dense.engine()),
          config_(dense.config()),
          probe_(probe),
          copy_tbps_(copy_tbps),
          gemm_tflops_(gemm_tflops),
          rng_(o.seed * 7919 + 1) {}

    core::Result<GenerateBenchRow> prefill(int64_t tokens);
    core::Result<GenerateBenchRow> decode(int64_t batch, int64_t context);

private:
    // One engine step; `finished` counts the sequences it retired.
    core::Status step(int64_t* finished = nullptr);

    const GenerateBenchOptions& o_;
    attention::Engine& engine_;
    const model::ModelConfig& config_;
    RoutingProbe& probe_;
    double copy_tbps_;
    double gemm_tflops_;
    std::mt19937_64 rng_;
};

core::Status Bench::step(int64_t* finished) {
    auto done = engine_.step();
    if (!done.isOk()) return done.status();
    if (finished != nullptr) *finished += static_cast<int64_t>(done->size());
    return core::Status::ok();
}

core::Result<GenerateBenchRow> Bench::prefill(int64_t tokens) {
    attention::SamplingParams params;
    params.max_tokens = 1;
    params.ignore_eos = true;
    std::vector<double> ms;
    for (int r = 0; r <= o_.prefill_reps; ++r) {  // the first is warm-up
        AFD_RETURN_IF_ERROR(engine_.addRequest(randomPrompt(rng_, tokens, config_.vocab_size), params).status());
        const uint64_t steps_before = engine_.numSteps();
        const auto start = Clock::now();
        while (engine_.hasWork()) AFD_RETURN_IF_ERROR(step());
        const double elapsed = msSince(start);
        if (engine_.numSteps() - steps_before != 1) {
            return core::internalError("bench generate: the prefill of {} tokens took {} steps, not one", tokens,
                                       engine_.numSteps() - steps_before);
        }
        if (r > 0) ms.push_back(elapsed);
    }
    GenerateBenchRow row;
    row.kind = "prefill";
    row.batch = 1;
    row.context = tokens;
    row.mean_context = static_cast<double>(tokens);
    summarize(ms, row);
    const double flops = prefillFlops(config_, tokens);
    row.tokens_per_s = static_cast<double>(tokens) / (row.median_ms * 1e-3);
    row.tflops = flops / (row.median_ms * 1e-3) / 1e12;
    row.floor_ms = flops / (gemm_tflops_ * 1e12) * 1e3;
    row.pct_of_floor = 100.0 * row.floor_ms / row.median_ms;
    return row;
}

core::Result<GenerateBenchRow> Bench::decode(int64_t batch, int64_t context) {
    const int64_t budget = std::max(o_.max_num_batched_tokens, o_.prefill_tokens);
    attention::SamplingParams params;
    params.max_tokens = decodeTokensNeeded(batch, context, budget, o_);
    params.ignore_eos = true;
    for (int64_t i = 0; i < batch; ++i) {
        AFD_RETURN_IF_ERROR(engine_.addRequest(randomPrompt(rng_, context, config_.vocab_size), params).status());
    }
    const auto& scheduler = engine_.scheduler();
    const int64_t preemptions_before = scheduler.numPreemptions();
    int64_t finished = 0;
    // Tokens of a step: the probe saw them (eager), or a replayed decode graph ran one row per running sequence.
    auto run = [&](int64_t* tokens, bool* replayed) -> core::Status {
        const uint64_t replays = engine_.numGraphReplays();
        const uint64_t seen = probe_.stepsSeen();
        const int64_t running = scheduler.numRunning();
        AFD_RETURN_IF_ERROR(step(&finished));
        *replayed = engine_.numGraphReplays() > replays;
        *tokens = *replayed ? running : (probe_.stepsSeen() > seen ? probe_.lastStepTokens() : 0);
        return core::Status::ok();
    };
    // Prefill (chunked, decodes of the sequences already prefilled mixed in) until a step of B decode rows.
    int64_t tokens_total = 0;
    for (int64_t guard = 0;; ++guard) {
        int64_t tokens = 0;
        bool replayed = false;
        AFD_RETURN_IF_ERROR(run(&tokens, &replayed));
        tokens_total += tokens;
        if (scheduler.numWaiting() == 0 && scheduler.numRunning() == batch && tokens == batch) break;
        if (guard > params.max_tokens) {
            return core::internalError("bench generate: batch {} context {}: no step of {} decode rows after {} steps",
                                       batch, context, batch, guard);
        }
    }
    const double decoded_before = static_cast<double>(tokens_total - batch * context) / static_cast<double>(batch);
    GenerateBenchRow row;
    for (int i = 0; i < o_.warmup_steps; ++i) AFD_RETURN_IF_ERROR(step(&finished));
    std::vector<double> ms;
    for (int i = 0; i < o_.steps; ++i) {
        int64_t tokens = 0;
        bool replayed = false;
        const auto start = Clock::now();
        AFD_RETURN_IF_ERROR(run(&tokens, &replayed));
        ms.push_back(msSince(start));
        row.all_steps_pure = row.all_steps_pure && tokens == batch;
    }
    if (finished != 0 || scheduler.numPreemptions() != preemptions_before) {
        return core::internalError(
            "bench generate: batch {} context {}: {} sequences finished and {} were preempted "
            "before the timed steps ended",
            batch, context, finished, scheduler.numPreemptions() - preemptions_before);
    }
    // The probe step: a 2-token request joins, so the step runs eagerly with the B decode rows first.
    attention::SamplingParams one;
    one.max_tokens = 1;
    one.ignore_eos = true;
    AFD_RETURN_IF_ERROR(engine_.addRequest(randomPrompt(rng_, 2, config_.vocab_size), one).status());
    probe_.arm(batch);
    AFD_RETURN_IF_ERROR(step(&finished));
    const std::vector<double> distinct = probe_.routedExperts();
    while (engine_.hasWork()) AFD_RETURN_IF_ERROR(step(&finished));

    row.kind = "decode";
    row.batch = batch;
    row.context = context;
    row.mean_context =
        static_cast<double>(context) + decoded_before + o_.warmup_steps + static_cast<double>(o_.steps - 1) / 2.0 + 1.0;
    summarize(ms, row);
    row.tokens_per_s = static_cast<double>(batch) / (row.median_ms * 1e-3);
    row.experts_uniform = expectedDistinctExperts(config_.num_experts, config_.num_experts_per_tok, batch);
    row.experts_source = distinct.empty() ? "uniform" : "measured";
    row.experts_per_layer = distinct.empty() ? row.experts_uniform
                                             : std::accumulate(distinct.begin(), distinct.end(), 0.0) /
                                                   static_cast<double>(distinct.size());
    const DecodeStepBytes bytes =
        decodeStepBytes(config_, batch, row.mean_context * static_cast<double>(batch), distinct);
    row.expert_bytes = bytes.experts;
    row.kv_bytes = bytes.kv;
    row.weight_bytes = bytes.attention_weights + bytes.routers + bytes.dense_mlp + bytes.lm_head;
    row.floor_bytes = bytes.total();
    row.floor_ms = row.floor_bytes / (copy_tbps_ * 1e12) * 1e3;
    row.pct_of_floor = 100.0 * row.floor_ms / row.median_ms;
    return row;
}

}  // namespace

core::Result<GenerateBenchResult> runGenerateBench(const GenerateBenchOptions& o, cli::ModelSource source) {
    AFD_CHECK(o.steps >= 1 && o.warmup_steps >= 1 && o.prefill_reps >= 1, "bench generate: bad step counts");
    if (deviceCount() == 0) return core::invalidArgument("bench generate: no CUDA device is visible");
    constexpr int kGpu = 0;
    AFD_CUDA_CHECK(cudaSetDevice(kGpu));
    GenerateBenchResult result;
    result.device = benchDeviceName();
    {
        // The rates first, while the memory they use is free.
        Stream stream;
        result.copy_tbps = measureCopyBandwidth(stream.get(), o.warmup_ms);
        result.gemm_tflops = measureCublasLtGemmTflops(kGpu, stream.get(), o.warmup_ms);
    }
    AFD_CHECK(source.random_weights, "bench generate runs on random weights");
    const model::ModelConfig& c = source.config;
    result.model = fmt::format(
        "{}: {} layers, hidden {}, {} experts top-{} of {}, {} q / {} kv heads of {}, vocab {}; random weights (seed "
        "{})",
        source.name, c.num_hidden_layers, c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
        c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size, source.weights_seed);

    // One engine for every point: sequences for the largest batch (+ the probe's request), the KV cache of the largest
    // point, a step budget that holds the prefill point in one step.
    int64_t max_batch = 1;
    for (const auto& [b, ctx] : o.points) max_batch = std::max(max_batch, b);
    const int64_t budget = std::max(o.max_num_batched_tokens, o.prefill_tokens);
    if (budget <= max_batch + 2) {
        return core::invalidArgument("--max-num-batched-tokens {} must exceed the largest --batch {} by 3 or more",
                                     budget, max_batch);
    }
    const int64_t bs = o.block_size;
    auto blocks = [bs](int64_t positions) { return (positions + bs - 1) / bs; };
    int64_t max_model_len = o.prefill_tokens + 1;
    int64_t kv_blocks = blocks(o.prefill_tokens + 1);
    for (const auto& [b, ctx] : o.points) {
        const int64_t len = ctx + decodeTokensNeeded(b, ctx, budget, o);
        max_model_len = std::max(max_model_len, len);
        kv_blocks = std::max(kv_blocks, b * blocks(len) + blocks(3));
    }
    if (max_model_len > c.max_position_embeddings) {
        AFD_LOG_WARN("bench generate: sequences reach {} positions, past the model's max_position_embeddings {}",
                     max_model_len, c.max_position_embeddings);
    }
    attention::AttentionRankOptions dense;
    dense.device = core::Device::cuda(kGpu);
    dense.engine.scheduler.max_num_seqs = max_batch + 1;
    dense.engine.scheduler.max_num_batched_tokens = budget;
    dense.engine.scheduler.max_model_len = max_model_len;
    dense.engine.block_size = bs;
    dense.engine.num_kv_blocks = kv_blocks;
    dense.engine.enforce_eager = o.enforce_eager;
    dense.engine.dual_batch_overlap = o.dual_batch_overlap;
    dense.afd = o.afd;
    result.engine =
        o.afd ? fmt::format("AFD attention rank ({} {} {}A{}F)", transport::connectorName(o.afd->connector),
                            transport::modeName(o.afd->mode()), o.afd->num_attention_ranks, o.afd->num_ffn_ranks)
              : std::string("dense engine");
    dense.engine.cuda_graph_max_batch_size = o.cuda_graph_max_batch_size;
    dense.gpu.kv_given = true;
    RoutingProbe* probe = nullptr;
    dense.wrap_backend = [&probe, max_batch](
                             std::unique_ptr<attention::MlpBackend> inner, const model::ModelConfig& config,
                             const model::ModelWeights& weights,
                             attention::DeviceOps& ops) -> core::Result<std::unique_ptr<attention::MlpBackend>> {
        auto wrapped = std::make_unique<RoutingProbe>(std::move(inner), config, weights, ops, max_batch);
        probe = wrapped.get();
        return std::unique_ptr<attention::MlpBackend>(std::move(wrapped));
    };
    const auto start = Clock::now();
    AFD_ASSIGN_OR_RETURN(std::unique_ptr<attention::AttentionRank> engine,
                         attention::AttentionRank::create(std::move(source), std::move(dense)));
    AFD_CHECK(probe != nullptr, "bench generate: the engine was built without the routing probe");
    AFD_LOG_INFO("bench generate: engine ready in {:.1f} s ({} KV blocks of {} tokens)", msSince(start) / 1e3,
                 kv_blocks, bs);
    result.weight_gb = static_cast<double>(engine->weights().owned_bytes) / 1e9;
    const auto& graphs = engine->engine().graphBatchSizes();
    result.graphs = graphs.empty() ? "eager" : fmt::format("graphs for batch {}", fmt::join(graphs, ","));

    Bench bench(o, *engine, *probe, result.copy_tbps, result.gemm_tflops);
    if (o.prefill_tokens > 0) {
        AFD_ASSIGN_OR_RETURN(GenerateBenchRow row, bench.prefill(o.prefill_tokens));
        result.rows.push_back(row);
    }
    for (const auto& [b, ctx] : o.points) {
        AFD_ASSIGN_OR_RETURN(GenerateBenchRow row, bench.decode(b, ctx));
        AFD_LOG_INFO("bench generate: batch {} context {}: {:.3f} ms per step", b, ctx, row.median_ms);
        result.rows.push_back(row);
    }
    AFD_RETURN_IF_ERROR(engine->engine().finish());
    return result;
}

}  // namespace afd::lab

#endif  // AFD_HAVE_CUDA_ATTENTION
