#include "attention/serving_test_util.h"

#include <fmt/format.h>

#include <filesystem>
#include <thread>

#include "attention/cpu_ops.h"
#include "attention/local_mlp_backend.h"
#include "common/subprocess_util.h"
#include "core/check.h"
#include "model/synthetic.h"

namespace afd::attention::test {

std::string fixtureModelDir() { return std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model"; }

std::string generatedModelDir() {
    static const afd::testing::TempDir dir;
    static const std::string path = [] {
        const std::string model = dir.path() + "/tiny";
        auto config = model::ModelConfig::preset("tiny");
        AFD_CHECK_OK(config.status());
        model::SyntheticOptions options;
        options.seed = 7;
        AFD_CHECK_OK(model::writeSyntheticCheckpoint(model, *config, options));
        return model;
    }();
    return path;
}

HostModel loadHostModel(const std::string& dir) {
    auto config = model::ModelConfig::fromFile(dir + "/config.json");
    AFD_CHECK_OK(config.status());
    auto checkpoint = model::Checkpoint::open(dir);
    AFD_CHECK_OK(checkpoint.status());
    HostModel m;
    m.config = std::move(config).value();
    m.checkpoint = std::make_unique<model::Checkpoint>(std::move(checkpoint).value());
    auto weights = model::loadWeights(*m.checkpoint, m.config, model::WeightSelection::everything(m.config));
    AFD_CHECK_OK(weights.status());
    m.weights = std::move(weights).value();
    return m;
}

ModelSource modelSource(const std::string& dir) {
    auto config = model::ModelConfig::fromFile(dir + "/config.json");
    AFD_CHECK_OK(config.status());
    auto checkpoint = model::Checkpoint::open(dir);
    AFD_CHECK_OK(checkpoint.status());
    ModelSource source;
    source.config = std::move(config).value();
    source.checkpoint.emplace(std::move(checkpoint).value());
    source.name = dir;
    return source;
}

EngineOptions testEngineOptions(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
    EngineOptions options;
    options.scheduler.max_model_len = 512;
    options.scheduler.max_num_seqs = max_num_seqs;
    options.scheduler.max_num_batched_tokens = max_num_batched_tokens;
    return options;
}

std::vector<std::vector<int32_t>> idsAlone(const HostModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const std::vector<SamplingParams>& params, const EngineOptions& options) {
    AFD_CHECK(prompts.size() == params.size(), "one SamplingParams per prompt");
    CpuOps ops;
    LocalMlpBackend backend(model.config, model.weights);
    Engine engine(model.config, model.weights, ops, backend, options);
    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
        AFD_CHECK_OK(engine.addRequest(prompts[i], params[i]).status());
        std::vector<std::unique_ptr<Sequence>> finished;
        while (engine.hasWork()) {
            auto done = engine.step();
            AFD_CHECK_OK(done.status());
            for (auto& seq : *done) finished.push_back(std::move(seq));
        }
        AFD_CHECK(finished.size() == 1, "one request, {} finished", finished.size());
        ids.push_back(std::move(finished[0]->output));
    }
    return ids;
}

SteeredBackend::SteeredBackend(std::unique_ptr<MlpBackend> inner) : inner_(std::move(inner)) {}

void SteeredBackend::closeGate() {
    std::lock_guard lock(mutex_);
    gate_closed_ = true;
    permits_ = 0;
}

void SteeredBackend::allowSteps(int n) {
    {
        std::lock_guard lock(mutex_);
        permits_ += n;
    }
    cv_.notify_all();
}

void SteeredBackend::openGate() {
    {
        std::lock_guard lock(mutex_);
        gate_closed_ = false;
    }
    cv_.notify_all();
}

void SteeredBackend::failNextStep(bool throw_instead) {
    std::lock_guard lock(mutex_);
    fail_next_ = true;
    throw_next_ = throw_instead;
}

void SteeredBackend::setRecoverable(bool recoverable) {
    std::lock_guard lock(mutex_);
    recoverable_ = recoverable;
}

void SteeredBackend::setStepDelay(std::chrono::milliseconds delay) {
    std::lock_guard lock(mutex_);
    delay_ = delay;
}

int SteeredBackend::stepsBegun() const {
    std::lock_guard lock(mutex_);
    return steps_begun_;
}

bool SteeredBackend::waitStepsBegun(int n, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return steps_begun_ >= n; });
}

int SteeredBackend::lastPlansSeen() const {
    std::lock_guard lock(mutex_);
    return last_plans_;
}

core::Status SteeredBackend::beginStep(const StepPlan& plan) {
    if (plan.last) {
        {
            std::lock_guard lock(mutex_);
            ++last_plans_;
        }
        return inner_->beginStep(plan);
    }
    std::chrono::milliseconds delay{0};
    {
        std::unique_lock lock(mutex_);
        ++steps_begun_;
        cv_.notify_all();
        cv_.wait_for(lock, kGateTimeout, [&] { return !gate_closed_ || permits_ > 0; });
        if (gate_closed_ && permits_ > 0) --permits_;
        failing_ = fail_next_;
        throwing_ = throw_next_;
        fail_next_ = false;
        throw_next_ = false;
        delay = delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    return inner_->beginStep(plan);
}

core::Status SteeredBackend::submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) {
    bool fail = false;
    bool do_throw = false;
    {
        std::lock_guard lock(mutex_);
        if ((failing_ || throwing_) && layer == fail_layer_) {
            fail = failing_ && !throwing_;
            do_throw = throwing_;
            failing_ = false;
            throwing_ = false;
        }
    }
    if (do_throw) AFD_FAIL("injected exception in step {}", stepsBegun());
    if (fail) return core::internalError("injected failure in step {}", stepsBegun());
    return inner_->submit(layer, stage, x, out);
}

core::Status SteeredBackend::resetAfterFailedStep() {
    std::lock_guard lock(mutex_);
    if (recoverable_) return inner_->resetAfterFailedStep();
    return core::peerLost("the steered backend cannot recover");
}

}  // namespace afd::attention::test
