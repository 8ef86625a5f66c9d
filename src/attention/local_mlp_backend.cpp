#include "attention/local_mlp_backend.h"

#include <chrono>

#include "kernels/mlp_block.h"

namespace afd::attention {

LocalMlpBackend::LocalMlpBackend(const model::ModelConfig& config, const model::ModelWeights& weights)
    : config_(config), weights_(weights), timings_(static_cast<size_t>(config.num_hidden_layers)) {}

core::Status LocalMlpBackend::beginStep(const StepPlan&) { return core::Status::ok(); }

core::Status LocalMlpBackend::submit(int64_t layer, int, const float* x, int64_t num_tokens, float* out) {
    const auto start = std::chrono::steady_clock::now();
    kernels::mlpBlockCpu(config_, weights_.mlp[static_cast<size_t>(layer)], x, num_tokens, out);
    timings_[static_cast<size_t>(layer)].compute_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return core::Status::ok();
}

core::Status LocalMlpBackend::collect(int64_t, int) { return core::Status::ok(); }
core::Status LocalMlpBackend::endStep() { return core::Status::ok(); }

}  // namespace afd::attention
