// CPU engine benchmarks (Google Benchmark):
//   BM_CatFiles / BM_LoadWeights: reading a checkpoint from the page cache with `cat > /dev/null` versus the
//     engine's loader (open + validate every header + pack experts + read every byte of the tensors it maps),
//     in the same run, as GB/s of checkpoint bytes.
//   BM_Decode: greedy decode tokens/s of the dense engine for the tiny and small presets, batch 1 and 8.
// Models are generated once under $AFD_BENCH_DIR (default /tmp/afd-bench).
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/local_mlp_backend.h"
#include "attention/offline.h"
#include "core/check.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace {

using namespace afd;

std::string modelDir(const std::string& preset) {
    const char* base = std::getenv("AFD_BENCH_DIR");
    const std::string dir = std::string(base ? base : "/tmp/afd-bench") + "/" + preset;
    if (!std::filesystem::exists(dir + "/config.json")) {
        auto config = model::ModelConfig::preset(preset);
        AFD_CHECK_OK(config.status());
        AFD_CHECK_OK(model::writeSyntheticCheckpoint(dir, *config, {}));
    }
    return dir;
}

const char* kPresets[] = {"tiny", "small"};

void BM_CatFiles(benchmark::State& state) {
    const std::string dir = modelDir(kPresets[state.range(0)]);
    auto checkpoint = model::Checkpoint::open(dir);
    AFD_CHECK_OK(checkpoint.status());
    std::string command = "cat";
    for (const auto& f : checkpoint->files()) command += " '" + f + "'";
    command += " > /dev/null";
    for (auto _ : state) {
        const int rc = std::system(command.c_str());
        AFD_CHECK(rc == 0, "{} failed", command);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * checkpoint->fileBytes()));
    state.SetLabel(kPresets[state.range(0)]);
}

uint64_t touch(const core::Tensor& t) {
    if (t.rawData() == nullptr) return 0;
    const auto* p = static_cast<const uint8_t*>(t.rawData());
    uint64_t sum = 0;
    for (size_t i = 0; i < t.nbytes(); i += 8) {
        uint64_t word = 0;
        std::memcpy(&word, p + i, std::min<size_t>(8, t.nbytes() - i));
        sum += word;
    }
    return sum;
}

void BM_LoadWeights(benchmark::State& state) {
    const std::string dir = modelDir(kPresets[state.range(0)]);
    uint64_t bytes = 0;
    for (auto _ : state) {
        auto config = model::ModelConfig::fromFile(dir + "/config.json");
        auto checkpoint = model::Checkpoint::open(dir);
        AFD_CHECK_OK(checkpoint.status());
        auto weights = model::loadWeights(*checkpoint, *config, model::WeightSelection::everything(*config));
        AFD_CHECK_OK(weights.status());
        // Views are mapped lazily: read their bytes so every checkpoint byte has been read once, as cat does.
        uint64_t sum = touch(weights->embed) + touch(weights->lm_head) + touch(weights->final_norm);
        for (const auto& a : weights->attention) {
            for (const auto* t :
                 {&a.input_norm, &a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &a.q_norm, &a.k_norm, &a.post_norm}) {
                sum += touch(*t);
            }
        }
        for (const auto& m : weights->mlp) sum += touch(m.router);
        benchmark::DoNotOptimize(sum);
        bytes = checkpoint->fileBytes();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.SetLabel(kPresets[state.range(0)]);
}

void BM_Decode(benchmark::State& state) {
    const std::string dir = modelDir(kPresets[state.range(0)]);
    const int64_t batch = state.range(1);
    constexpr int64_t kNewTokens = 32;
    auto config = model::ModelConfig::fromFile(dir + "/config.json");
    auto checkpoint = model::Checkpoint::open(dir);
    auto weights = model::loadWeights(*checkpoint, *config, model::WeightSelection::everything(*config));
    AFD_CHECK_OK(weights.status());
    attention::CpuOps ops;
    attention::LocalMlpBackend backend(*config, *weights);
    attention::EngineOptions options;
    options.scheduler.max_model_len = 256;
    attention::SamplingParams params;
    params.max_tokens = kNewTokens;
    params.ignore_eos = true;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t b = 0; b < batch; ++b) prompts.push_back({static_cast<int32_t>(b + 1), 7, 11, 13});
    double decode_seconds = 0.0;
    int64_t decode_tokens = 0;
    for (auto _ : state) {
        attention::Engine engine(*config, *weights, ops, backend, options);
        for (const auto& p : prompts) AFD_CHECK_OK(engine.addRequest(p, params).status());
        // The first step is the prefill (and the first token); time the decode steps after it.
        AFD_CHECK_OK(engine.step().status());
        const auto start = std::chrono::steady_clock::now();
        while (engine.hasWork()) AFD_CHECK_OK(engine.step().status());
        decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        decode_tokens += batch * (kNewTokens - 1);
    }
    state.counters["decode_tok_per_s"] = static_cast<double>(decode_tokens) / decode_seconds;
    state.SetLabel(std::string(kPresets[state.range(0)]) + " batch " + std::to_string(batch));
}

BENCHMARK(BM_CatFiles)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadWeights)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)
    ->Args({0, 1})
    ->Args({0, 8})
    ->Args({1, 1})
    ->Args({1, 8})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
