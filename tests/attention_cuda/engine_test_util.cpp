#include "attention_cuda/engine_test_util.h"

#include <cmath>
#include <map>
#include <utility>

#include "attention/cpu_ops.h"
#include "attention/cuda/device_weights.h"
#include "attention/device_ops_factory.h"
#include "attention/local_mlp_backend.h"
#include "core/check.h"
#include "kernels/cuda/device_info.h"

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
