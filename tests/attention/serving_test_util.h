// Helpers of the serving tests (engine_serving_test, engine_loop_test, attention_rank_test): the models (the HF
// fixture and a generated one), reference ids of requests run alone, and an MLP backend wrapper the tests steer from
// their own thread (hold steps at a gate, slow them, fail or throw in one).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention/engine.h"
#include "attention/mlp_backend.h"
#include "attention/model_source.h"
#include "attention/sampling_params.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace afd::attention::test {

// tests/data/qwen3-moe-tiny/model (HF transformers' reference in ../expected.json).
std::string fixtureModelDir();
// A tiny model written by the synthetic generator (seed 7), once per test process, into a temporary directory.
std::string generatedModelDir();

// A checkpoint with every weight loaded on the host (views of its mappings: it lives as long).
struct HostModel {
    model::ModelConfig config;
    std::unique_ptr<model::Checkpoint> checkpoint;
    model::ModelWeights weights;
};
HostModel loadHostModel(const std::string& dir);  // throws core::Error on failure
ModelSource modelSource(const std::string& dir);  // for AttentionRank

// Engine options for the tests: max_model_len 512 and the given step budget.
EngineOptions testEngineOptions(int64_t max_num_seqs = 64, int64_t max_num_batched_tokens = 2048);

// Each request's new ids when it runs alone on a fresh CPU engine with `options` (one request at a time).
std::vector<std::vector<int32_t>> idsAlone(const HostModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const std::vector<SamplingParams>& params, const EngineOptions& options);

// Wraps a backend; the test thread steers it while the engine thread steps. Steps with a `last` plan (finish) pass
// untouched. Thread-safe controls.
class SteeredBackend : public MlpBackend {
public:
    explicit SteeredBackend(std::unique_ptr<MlpBackend> inner);

    // While closed, each step waits in beginStep for a permit (allowSteps), at most kGateTimeout (then goes on, so that
    // a failing test cannot hang).
    void closeGate();
    void allowSteps(int n);
    void openGate();
    // The next step fails part-way: submit of layer 1 returns kInternal "injected failure in step N" (or throws
    // core::Error, with `throw_instead`).
    void failNextStep(bool throw_instead = false);
    // resetAfterFailedStep's answer (default ok: the backend recovers).
    void setRecoverable(bool recoverable);
    // Each step sleeps this long in beginStep.
    void setStepDelay(std::chrono::milliseconds delay);
    // Steps begun (not counting finish), and waiting until `n` have begun.
    int stepsBegun() const;
    bool waitStepsBegun(int n, std::chrono::milliseconds timeout) const;
    int lastPlansSeen() const;  // beginStep calls with a `last` plan

    static constexpr std::chrono::seconds kGateTimeout{20};

    void reserve(const StepLimits& limits) override { inner_->reserve(limits); }
    core::Status beginStep(const StepPlan& plan) override;
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override;
    core::Status collect(int64_t layer, int stage) override { return inner_->collect(layer, stage); }
    core::Status endStep() override { return inner_->endStep(); }
    core::Status resetAfterFailedStep() override;
    bool capturable() const override { return false; }

private:
    std::unique_ptr<MlpBackend> inner_;
    mutable std::mutex mutex_;
    mutable std::condition_variable cv_;
    bool gate_closed_ = false;
    int permits_ = 0;
    bool fail_next_ = false;
    bool throw_next_ = false;
    bool failing_ = false;  // the current step fails at layer 1
    bool throwing_ = false;
    bool recoverable_ = true;
    std::chrono::milliseconds delay_{0};
    int steps_begun_ = 0;
    int last_plans_ = 0;
    int64_t fail_layer_ = 1;
};

}  // namespace afd::attention::test
