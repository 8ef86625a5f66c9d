#include "lab/moe_bench.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/device_memory.h"
#include "lab/bench_timing.h"

namespace afd::lab {
namespace {

using kernels::MoeCudaPlan;
using kernels::MoeParams;
using kernels::MoeTileConfig;
using kernels::cuda::Stream;

struct HostRouting {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    int64_t distinct = 0;
};

// K distinct experts per token; zipf draws expert ranks with weight 1/(r+1)^s over a random rank order;
// balanced gives entry j of token t the expert (t K + j) mod E, so every expert holds T K / E entries (+-1) and no
// expert has a partly filled token tile beyond its first unless T K / E itself leaves one (a diagnostic of the
// cost of partial tiles against uniform). Weights are positive and sum to one per token (as after
// renormalisation).
HostRouting makeRouting(const std::string& kind, int64_t tokens, const MoeBenchOptions& o, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> rank_to_expert(static_cast<size_t>(o.experts));
    std::iota(rank_to_expert.begin(), rank_to_expert.end(), 0);
    std::shuffle(rank_to_expert.begin(), rank_to_expert.end(), rng);
    std::vector<double> base(static_cast<size_t>(o.experts), 1.0);
    if (kind == "zipf") {
        for (int64_t r = 0; r < o.experts; ++r) {
            base[static_cast<size_t>(r)] = 1.0 / std::pow(static_cast<double>(r + 1), o.zipf_exponent);
        }
    }
    HostRouting h;
    h.ids.resize(static_cast<size_t>(tokens * o.top_k));
    h.weights.resize(h.ids.size());
    std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
    std::set<int32_t> touched;
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<double> w = base;
        float sum = 0.0f;
        for (int64_t j = 0; j < o.top_k; ++j) {
            const size_t i = static_cast<size_t>(t * o.top_k + j);
            if (kind == "balanced") {
                h.ids[i] = static_cast<int32_t>((t * o.top_k + j) % o.experts);
            } else {
                std::discrete_distribution<int32_t> pick(w.begin(), w.end());
                const int32_t r = pick(rng);
                w[static_cast<size_t>(r)] = 0.0;
                h.ids[i] = rank_to_expert[static_cast<size_t>(r)];
            }
            h.weights[i] = uniform(rng);
            sum += h.weights[i];
            touched.insert(h.ids[i]);
        }
        for (int64_t j = 0; j < o.top_k; ++j) {
            h.weights[static_cast<size_t>(t * o.top_k + j)] /= sum;
        }
    }
    h.distinct = static_cast<int64_t>(touched.size());
    return h;
}

void dumpRouting(const std::string& dir, const std::string& kind, int64_t tokens, const MoeBenchOptions& o,
                 const HostRouting& h) {
    const std::string path = dir + "/" + routingFileName(kind, tokens);
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    AFD_CHECK(f != nullptr, "cannot write routing file {}", path);
    const int64_t header[3] = {tokens, o.top_k, o.experts};
    const bool ok = std::fwrite(header, sizeof(header), 1, f.get()) == 1 &&
                    std::fwrite(h.ids.data(), 4, h.ids.size(), f.get()) == h.ids.size() &&
                    std::fwrite(h.weights.data(), 4, h.weights.size(), f.get()) == h.weights.size();
    AFD_CHECK(ok, "short write to routing file {}", path);
}

// One layer's device data (weights, input, output). The weights are random values written straight into the packed
// layout the kernels stream (moePackWeightsCuda): a permutation of random values is as random, and the padding
// columns of a packed w2 (I % 64 != 0) meet the zero-filled columns of h's token boxes.
struct Layer {
    DeviceMemory w13;
    DeviceMemory w2;
    DeviceMemory x;
    DeviceMemory out;
    Layer(const MoeBenchOptions& o, int64_t experts, int64_t max_tokens, int index, cudaStream_t stream)
        : w13(kernels::moePackedWeightBytes(experts, o.hidden, o.inter).w13),
          w2(kernels::moePackedWeightBytes(experts, o.hidden, o.inter).w2),
          x(static_cast<size_t>(max_tokens * o.hidden) * 2),
          out(static_cast<size_t>(max_tokens * o.hidden) * 2) {
        const uint64_t seed = o.seed * 1000 + static_cast<uint64_t>(index) * 10;
        fillRandom(w13.get(), w13.bytes() / 2, seed + 1, 2.0f / std::sqrt(static_cast<float>(o.hidden)), stream);
        fillRandom(w2.get(), w2.bytes() / 2, seed + 2, 2.0f / std::sqrt(static_cast<float>(o.inter)), stream);
        fillRandom(x.get(), x.bytes() / 2, seed + 3, 1.0f, stream);
    }
};

// The layer as the timed graphs run it: moeForwardCuda, or its stages without `omit` ("permute": its outputs are
// those the untimed eager run left in the workspace for the same routing; "combine": out is not written), which
// bounds what hiding that stage could gain.
void timedLayer(const MoeParams& params, const MoeCudaPlan& plan, void* ws, size_t ws_bytes, cudaStream_t s,
                const std::string& omit) {
    if (omit.empty()) {
        kernels::moeForwardCuda(params, plan, ws, ws_bytes, s);
        return;
    }
    if (omit != "permute") {
        kernels::moePermuteCuda(params, plan, ws, ws_bytes, s);
    }
    kernels::moeGateUpCuda(params, plan, ws, ws_bytes, s);
    kernels::moeDownCuda(params, plan, ws, ws_bytes, s);
    if (omit != "combine") {
        kernels::moeCombineCuda(params, plan, ws, ws_bytes, s);
    }
}

}  // namespace

int64_t keepFirstRankEntries(std::vector<int32_t>& ids, int64_t local_experts, int64_t* distinct) {
    std::set<int32_t> touched;
    int64_t served = 0;
    for (int32_t& id : ids) {
        if (id >= 0 && id < local_experts) {
            touched.insert(id);
            ++served;
        } else {
            id = -1;
        }
    }
    *distinct = static_cast<int64_t>(touched.size());
    return served;
}

std::string routingFileName(const std::string& routing, int64_t tokens) {
    return fmt::format("routing_{}_T{}.bin", routing, tokens);
}

MoeBenchResult runMoeBench(const MoeBenchOptions& o) {
    AFD_CHECK(kernels::cuda::deviceCount() > 0, "afd bench moe needs a CUDA device");
    AFD_CHECK(o.layers >= 1 && o.reps >= 1, "bench moe: layers {} and reps {} must be >= 1", o.layers, o.reps);
    AFD_CHECK(o.omit_stage.empty() || o.omit_stage == "permute" || o.omit_stage == "combine",
              "bench moe: omit_stage must be permute or combine, got '{}'", o.omit_stage);
    AFD_CHECK(o.ffn_ranks >= 1 && o.experts % o.ffn_ranks == 0,
              "bench moe: ffn_ranks {} must be at least 1 and divide experts {}", o.ffn_ranks, o.experts);
    AFD_CHECK(o.ffn_ranks == 1 || o.dump_routing_dir.empty(),
              "bench moe: the peers time a whole layer, so dump_routing_dir needs ffn_ranks 1 (got {})", o.ffn_ranks);
    const int64_t local_experts = o.experts / o.ffn_ranks;
    Stream stream;
    MoeBenchResult result = startBenchResult<MoeBenchRow>(stream.get(), o.warmup_ms);

    const int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
    std::vector<std::unique_ptr<Layer>> layers;
    for (int l = 0; l < o.layers; ++l) {
        layers.push_back(std::make_unique<Layer>(o, local_experts, max_tokens, l, stream.get()));
    }
    DeviceMemory ids(static_cast<size_t>(max_tokens * o.top_k) * 4);
    DeviceMemory weights(static_cast<size_t>(max_tokens * o.top_k) * 4);
    DeviceMemory workspace(kernels::moeCudaWorkspaceBytes(max_tokens, o.top_k, local_experts, o.hidden, o.inter));
    AFD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    const double expert_bytes = 3.0 * static_cast<double>(o.hidden * o.inter) * 2.0;
    for (const int64_t tokens : o.tokens) {
        for (const std::string& kind : o.routings) {
            HostRouting routing = makeRouting(kind, tokens, o, o.seed + static_cast<uint64_t>(tokens));
            if (!o.dump_routing_dir.empty()) {
                dumpRouting(o.dump_routing_dir, kind, tokens, o, routing);
            }
            const int64_t served = o.ffn_ranks > 1 ? keepFirstRankEntries(routing.ids, local_experts, &routing.distinct)
                                                   : tokens * o.top_k;
            AFD_CUDA_CHECK(cudaMemcpy(ids.get(), routing.ids.data(), routing.ids.size() * 4, cudaMemcpyHostToDevice));
            AFD_CUDA_CHECK(
                cudaMemcpy(weights.get(), routing.weights.data(), routing.weights.size() * 4, cudaMemcpyHostToDevice));
            auto params = [&](int l) {
                MoeParams p;
                p.num_tokens = tokens;
                p.hidden = o.hidden;
                p.inter = o.inter;
                p.num_experts = local_experts;
                p.routed_experts = o.experts;
                p.top_k = o.top_k;
                p.act_dtype = kernels::ActDType::kBf16;
                p.x = layers[static_cast<size_t>(l)]->x.get();
                p.topk_ids = ids.as<int32_t>();
                p.topk_weights = weights.as<float>();
                p.w13 = layers[static_cast<size_t>(l)]->w13.as<core::Bf16>();
                p.w2 = layers[static_cast<size_t>(l)]->w2.as<core::Bf16>();
                p.out = layers[static_cast<size_t>(l)]->out.get();
                return p;
            };
            // Every config's graphs first, then their replays interleaved (timeInterleaved), then each config's
            // stages.
            struct Config {
                MoeCudaPlan plan;
                MoeBenchRow row;
                std::vector<std::unique_ptr<Graph>> graphs;  // one per layer
            };
            std::vector<Config> configs;
            void* ws = workspace.get();
            const size_t ws_bytes = workspace.bytes();
            const cudaStream_t s = stream.get();
            for (const MoeTileConfig tile : o.tiles) {
                const MoeCudaPlan plan = kernels::planMoeCuda(params(0), tile);
                MoeBenchRow row;
                row.tokens = tokens;
                row.routing = kind;
                row.tile = kernels::moeTileConfigName(plan.tile);
                if (tile == MoeTileConfig::kAuto) {
                    row.tile = std::string("auto:") + row.tile;
                }
                if (!o.omit_stage.empty()) {
                    row.tile += "-no-" + o.omit_stage;
                }
                row.distinct_experts = routing.distinct;
                row.entries = served;
                std::vector<std::unique_ptr<Graph>> graphs;
                for (int l = 0; l < o.layers; ++l) {
                    kernels::moeForwardCuda(params(l), plan, ws, ws_bytes, s);  // eager: module load, first launch
                    graphs.push_back(std::make_unique<Graph>(
                        s, [&] { timedLayer(params(l), plan, ws, ws_bytes, s, o.omit_stage); }));
                }
                configs.push_back({plan, row, std::move(graphs)});
            }
            AFD_CUDA_CHECK(cudaStreamSynchronize(s));
            // Replay r of the round-robin sequence uses layer r % layers, so consecutive replays (of one config or of
            // two) never share weights in L2; with one config this is replay i on layer i % layers.
            const size_t n = configs.size();
            const std::vector<Timing> timings = timeInterleaved(
                s, o.warmup, o.reps, n,
                [&](int i, size_t c) {
                    const size_t replay = static_cast<size_t>(i) * n + c;
                    configs[c].graphs[replay % static_cast<size_t>(o.layers)]->launch(s);
                },
                o.warmup_ms);
            for (size_t c = 0; c < n; ++c) {
                MoeBenchRow& row = configs[c].row;
                row.median_us = timings[c].median_us;
                row.p10_us = timings[c].p10_us;
                row.p90_us = timings[c].p90_us;
                if (o.stages) {
                    using StageFn = void (*)(const MoeParams&, const MoeCudaPlan&, void*, size_t, void*);
                    const StageFn stages[4] = {&kernels::moePermuteCuda, &kernels::moeGateUpCuda, &kernels::moeDownCuda,
                                               &kernels::moeCombineCuda};
                    const MoeCudaPlan alone = kernels::withStagesReplayableAlone(configs[c].plan);
                    double* outs[4] = {&row.permute_us, &row.gate_up_us, &row.down_us, &row.combine_us};
                    for (int st = 0; st < 4; ++st) {
                        std::vector<std::unique_ptr<Graph>> stage_graphs;
                        for (int l = 0; l < o.layers; ++l) {
                            stage_graphs.push_back(
                                std::make_unique<Graph>(s, [&] { stages[st](params(l), alone, ws, ws_bytes, s); }));
                        }
                        const int reps = std::max(10, o.reps / 2);
                        *outs[st] =
                            timeRuns(
                                s, 3, reps, [&](int i) { stage_graphs[static_cast<size_t>(i % o.layers)]->launch(s); },
                                o.warmup_ms)
                                .median_us;
                    }
                }
                const double flops =
                    2.0 * static_cast<double>(row.entries) * 3.0 * static_cast<double>(o.hidden * o.inter);
                row.mem_floor_us =
                    static_cast<double>(row.distinct_experts) * expert_bytes / (result.copy_tbps * 1e12) * 1e6;
                row.flop_floor_us = flops / (result.gemm_tflops * 1e12) * 1e6;
                row.floor_us = std::max(row.mem_floor_us, row.flop_floor_us);
                row.pct_of_floor = 100.0 * row.floor_us / row.median_us;
                row.tflops = flops / (row.median_us * 1e-6) / 1e12;
                result.rows.push_back(row);
            }
        }
    }
    return result;
}

}  // namespace afd::lab
