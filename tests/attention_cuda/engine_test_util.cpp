#include "attention_cuda/engine_test_util.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "attention/cpu_ops.h"
#include "attention/cuda/device_weights.h"
#include "attention/device_ops_factory.h"
#include "attention/local_mlp_backend.h"
#include "core/check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/linear.h"

namespace afd::attention::test {

bool haveGpu() { return kernels::cuda::deviceCount() > 0; }

HostModel loadHostModel(const std::string& dir) {
    HostModel m;
    auto config = model::ModelConfig::fromFile(dir + "/config.json");
    AFD_CHECK_OK(config.status());
    m.config = std::move(config).value();
    auto checkpoint = model::Checkpoint::open(dir);
    AFD_CHECK_OK(checkpoint.status());
    m.checkpoint = std::make_unique<model::Checkpoint>(std::move(checkpoint).value());
    auto weights = model::loadWeights(*m.checkpoint, m.config, model::WeightSelection::everything(m.config));
    AFD_CHECK_OK(weights.status());
    m.weights = std::move(weights).value();
    return m;
}

model::ModelWeights uploadToGpu(const HostModel& host) {
    auto weights = uploadModelWeights(host.config, host.weights, 0);
    AFD_CHECK_OK(weights.status());
    return std::move(weights).value();
}

std::vector<Request> greedyRequests(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    std::vector<Request> requests;
    for (const auto& p : prompts) {
        Request r;
        r.prompt = p;
        r.params.max_tokens = max_tokens;
        r.params.ignore_eos = true;
        requests.push_back(std::move(r));
    }
    return requests;
}

RunOutput runRequests(Engine& engine, const std::vector<Request>& requests, bool one_at_a_time) {
    RunOutput out;
    out.ids.resize(requests.size());
    out.prompt_logits.resize(requests.size());
    std::map<int64_t, size_t> index_of;
    auto drain = [&] {
        while (engine.hasWork()) {
            auto finished = engine.step();
            AFD_CHECK_OK(finished.status());
            for (auto& seq : *finished) {
                const size_t i = index_of.at(seq->id);
                out.ids[i] = std::move(seq->output);
                out.prompt_logits[i] = std::move(seq->prompt_last_logits);
            }
        }
    };
    for (size_t i = 0; i < requests.size(); ++i) {
        auto id = engine.addRequest(requests[i].prompt, requests[i].params, true);
        AFD_CHECK_OK(id.status());
        index_of[*id] = i;
        if (one_at_a_time) drain();
    }
    drain();
    AFD_CHECK_OK(engine.finish());
    out.graph_replays = engine.numGraphReplays();
    out.eager_steps = engine.numEagerSteps();
    out.preemptions = engine.scheduler().numPreemptions();
    out.graph_sizes = engine.graphBatchSizes();
    return out;
}

RunOutput runOnGpu(const model::ModelConfig& config, const model::ModelWeights& device_weights,
                   const std::vector<Request>& requests, const EngineOptions& options, bool one_at_a_time) {
    auto ops = createDeviceOps(core::Device::cuda(0));
    AFD_CHECK_OK(ops.status());
    auto backend = createLocalMlpBackend(config, device_weights, **ops);
    AFD_CHECK_OK(backend.status());
    auto engine = Engine::create(config, device_weights, **ops, **backend, options);
    AFD_CHECK_OK(engine.status());
    return runRequests(**engine, requests, one_at_a_time);
}

RunOutput runOnCpu(const model::ModelConfig& config, const model::ModelWeights& host_weights,
                   const std::vector<Request>& requests, const EngineOptions& options, bool one_at_a_time,
                   CpuPrecision precision) {
    CpuOps ops(precision);
    auto backend = createLocalMlpBackend(config, host_weights, ops);
    AFD_CHECK_OK(backend.status());
    auto engine = Engine::create(config, host_weights, ops, **backend, options);
    AFD_CHECK_OK(engine.status());
    return runRequests(**engine, requests, one_at_a_time);
}

namespace {

// The CPU MLP backend, recording the smallest router gap (top_k-th minus next logit) of the MoE layers it runs.
class RouterGapBackend : public MlpBackend {
public:
    RouterGapBackend(const model::ModelConfig& config, const model::ModelWeights& weights, bool bf16)
        : config_(config), weights_(weights), inner_(config, weights, bf16) {}
    float takeMinGap() { return std::exchange(min_gap_, INFINITY); }

    core::Status beginStep(const StepPlan& plan) override { return inner_.beginStep(plan); }
    core::Status submit(int64_t layer, int stage, const core::Tensor& x, const core::Tensor& out) override {
        if (config_.isMoeLayer(layer)) {
            const int64_t H = config_.hidden_size;
            const int64_t E = config_.num_experts;
            const int64_t K = config_.num_experts_per_tok;
            const core::Bf16* gate = weights_.mlp[static_cast<size_t>(layer)].router.data<core::Bf16>();
            std::vector<float> logits(static_cast<size_t>(E));
            for (int64_t t = 0; t < x.size(0); ++t) {
                for (int64_t e = 0; e < E; ++e) {
                    logits[static_cast<size_t>(e)] = kernels::dotF32Bf16(x.data<float>() + t * H, gate + e * H, H);
                }
                std::sort(logits.rbegin(), logits.rend());
                if (K < E)
                    min_gap_ = std::min(min_gap_, logits[static_cast<size_t>(K - 1)] - logits[static_cast<size_t>(K)]);
            }
        }
        return inner_.submit(layer, stage, x, out);
    }
    core::Status collect(int64_t layer, int stage) override { return inner_.collect(layer, stage); }
    core::Status endStep() override { return inner_.endStep(); }
    bool capturable() const override { return false; }

private:
    const model::ModelConfig& config_;
    const model::ModelWeights& weights_;
    LocalMlpBackend inner_;
    float min_gap_ = INFINITY;
};

}  // namespace

std::vector<float> referenceRouterGaps(const model::ModelConfig& config, const model::ModelWeights& host_weights,
                                       const std::vector<Request>& requests, const EngineOptions& options,
                                       CpuPrecision precision) {
    CpuOps ops(precision);
    RouterGapBackend backend(config, host_weights, precision == CpuPrecision::kBf16Activations);
    auto engine = Engine::create(config, host_weights, ops, backend, options);
    AFD_CHECK_OK(engine.status());
    std::vector<float> gaps;
    for (const Request& r : requests) {
        AFD_CHECK_OK((*engine)->addRequest(r.prompt, r.params).status());
        while ((*engine)->hasWork()) AFD_CHECK_OK((*engine)->step().status());
        gaps.push_back(backend.takeMinGap());
    }
    AFD_CHECK_OK((*engine)->finish());
    return gaps;
}

double relativeL2(const std::vector<float>& got, const std::vector<double>& want) {
    AFD_CHECK(got.size() == want.size(), "{} values against {}", got.size(), want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

}  // namespace afd::attention::test
