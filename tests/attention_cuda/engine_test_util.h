// Helpers of the GPU engine tests: skipping without a GPU, loading a checkpoint as `afd` does (cli/model_loading.cpp)
// and uploading it, and running request lists through the dense GPU engine (CudaOps + the CUDA MLP backend) or the
// CPU reference engine, all at once or one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/cpu_ops.h"
#include "attention/engine.h"
#include "attention/sampling_params.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention::test {

bool haveGpu();

#define AFD_SKIP_WITHOUT_GPU()                                                    \
    do {                                                                          \
        if (!::afd::attention::test::haveGpu()) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

inline const std::string kTinyDir = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny";

// A checkpoint on the host: its weights are views of the checkpoint's mappings, so the checkpoint lives as long.
struct HostModel {
    model::ModelConfig config;
    std::unique_ptr<model::Checkpoint> checkpoint;
    model::ModelWeights weights;
};
// Config, checkpoint and the whole model's weights of `dir` (throws core::Error on failure).
HostModel loadHostModel(const std::string& dir);
// The weights on cuda:0 (uploadModelWeights).
model::ModelWeights uploadToGpu(const HostModel& host);

struct Request {
    std::vector<int32_t> prompt;
    SamplingParams params;
};
// Greedy requests of `max_tokens` new tokens each, past any end-of-sequence token.
std::vector<Request> greedyRequests(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens);

struct RunOutput {
    std::vector<std::vector<int32_t>> ids;          // new tokens of each request, in request order
    std::vector<std::vector<float>> prompt_logits;  // logits at each prompt's last position
    uint64_t graph_replays = 0;
    uint64_t eager_steps = 0;
    int64_t preemptions = 0;
    std::vector<int64_t> graph_sizes;  // the buckets the engine captured
};

// Runs `requests` on `engine` to the end: all queued at once, or each alone (queued after the previous finished).
RunOutput runRequests(Engine& engine, const std::vector<Request>& requests, bool one_at_a_time);

// A fresh engine for each call: the dense GPU engine on cuda:0 over device weights, or the CPU reference.
RunOutput runOnGpu(const model::ModelConfig& config, const model::ModelWeights& device_weights,
                   const std::vector<Request>& requests, const EngineOptions& options, bool one_at_a_time = false);
// `precision` kBf16Activations: the CPU reference at the GPU engine's precision (cpu_ops.h).
RunOutput runOnCpu(const model::ModelConfig& config, const model::ModelWeights& host_weights,
                   const std::vector<Request>& requests, const EngineOptions& options, bool one_at_a_time = false,
                   CpuPrecision precision = CpuPrecision::kFp32);

// For each request run alone on the CPU reference: the smallest gap, over every MoE layer and every token its steps
// route, between the top_k-th and the next router logit. Below about 1e-2 a perturbation of bf16 size (any two
// engines that round differently) may swap an expert there, and a random model's output then differs for good: such
// a request cannot tell two engines' precision apart, whatever their correctness.
std::vector<float> referenceRouterGaps(const model::ModelConfig& config, const model::ModelWeights& host_weights,
                                       const std::vector<Request>& requests, const EngineOptions& options,
                                       CpuPrecision precision = CpuPrecision::kFp32);
// Router gaps above this decide the same experts on every engine: the GPU engine and the reference at its precision
// were seen to swap experts at gaps up to about 3e-3 (a bf16 rounding of a normed value that lands on the other side
// of a rounding boundary shifts a router logit by about 1e-3); CudaEnginePrecisionTest measures the engines'
// differences on the decidable steps.
inline constexpr float kDecidableRouterGap = 1e-2f;

// Relative L2 error ||got - want|| / ||want||.
double relativeL2(const std::vector<float>& got, const std::vector<double>& want);

}  // namespace afd::attention::test
