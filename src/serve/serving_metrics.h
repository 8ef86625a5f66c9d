// ServingMetrics: the attention server's /metrics (Prometheus text, core::MetricsRegistry::kContentType), with
// vLLM-like names under an `afd_` prefix. docs/metrics.md lists every family with its type, labels and meaning.
//
// Per request (onRequestDone, from the API server's RequestRecord), labelled endpoint="completions" or
// "chat_completions":
//   afd_time_to_first_token_seconds            histogram  arrival → first token (requests that got a token)
//   afd_inter_token_latency_seconds            histogram  the gap between consecutive outputs, spread over the later
//                                                         output's tokens (one observation per token)
//   afd_e2e_request_latency_seconds            histogram  arrival → reply complete (all but rejected requests)
//   afd_request_prompt_tokens                  histogram  prompt length (all but rejected requests)
//   afd_request_generation_tokens              histogram  output length (all but rejected requests)
//   afd_request_finished_total{finished_reason}   counter  every request: stop, length, aborted, error, rejected
//   afd_request_success_total{finished_reason}    counter  those that ended with stop or length (vLLM's name)
// Per engine step (onStep, on the engine thread):
//   afd_engine_steps_total, afd_engine_failed_steps_total   counters  forward passes (steps that computed tokens)
//   afd_engine_step_seconds                                 histogram wall time of one step
//   afd_layer_a2f_seconds{layer}, afd_layer_f2a_seconds{layer}  histograms  AFD only: per step and crossing layer,
//       the attention side's time sending the layer's rows to the FFN ranks (A2F) and waiting for and taking in
//       their results (F2A), summed over the step's stages (MlpBackend::stepLayerTimings); none with the dense
//       engine
// From the engine's stats (the stats source, read at each render()):
//   afd_num_requests_running, afd_num_requests_waiting                     gauges
//   afd_kv_blocks_total, afd_kv_blocks_used, afd_kv_cache_usage_perc (0…1) gauges
//   afd_prompt_tokens_total, afd_generation_tokens_total, afd_num_preemptions_total  counters
// From the FFN ranks (their admin /metrics, fetched at each render()), labelled ffn_rank:
//   afd_ffn_rank_up                                   gauge    1 when the rank answered within the timeout, else 0
//   afd_ffn_expert_tokens_total{expert}               counter  the rank's tokens routed to each of its experts
//
// Ownership: ServingMetrics owns its registry (registry() lets others add families beside these).
// Threads: onRequestDone and render from any thread; onStep from the engine thread only (no lock, no allocation
// after the first step that crosses each layer); setStatsSource before serving (it is also safe later).
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/engine.h"
#include "attention/engine_loop.h"
#include "core/metrics.h"
#include "serve/request_record.h"

namespace afd::serve {

struct ServingMetricsOptions {
    // The FFN ranks' admin ports on ffn_admin_host, in rank order (index = the ffn_rank label); empty: none (the
    // dense engine, or FFN ranks this process does not know).
    std::vector<int> ffn_admin_ports;
    std::string ffn_admin_host = "127.0.0.1";
    // Connect and reply bound for each rank's /metrics; the ranks are asked at once, so render() waits about this
    // long at most when ranks do not answer.
    std::chrono::milliseconds ffn_timeout{500};
};

class ServingMetrics {
public:
    explicit ServingMetrics(ServingMetricsOptions options = {});
    ~ServingMetrics();
    ServingMetrics(const ServingMetrics&) = delete;
    ServingMetrics& operator=(const ServingMetrics&) = delete;

    // Where render() reads the engine's stats (EngineLoop::stats); without one those gauges and counters stay 0.
    void setStatsSource(std::function<attention::EngineLoopStats()> source);

    void onRequestDone(const RequestRecord& record);
    // EngineLoopOptions::on_step: onStep(report, engine.backend().stepLayerTimings()).
    void onStep(const attention::StepReport& report, const attention::Engine& engine);
    // `layers`: the step's per-layer timings (empty without AFD); layers without crossings are skipped.
    void onStep(const attention::StepReport& report, std::span<const attention::MlpBackend::LayerTiming> layers);

    // The text for GET /metrics: refreshes the stats families, renders the registry, then appends the FFN ranks'
    // families. Never fails: a rank that does not answer shows as afd_ffn_rank_up 0.
    std::string render();

    core::MetricsRegistry& registry() { return registry_; }

private:
    struct EndpointFamilies;
    EndpointFamilies& endpoint(const std::string& name);
    void refreshStats();
    std::string renderFfnRanks() const;

    const ServingMetricsOptions options_;
    core::MetricsRegistry registry_;

    std::mutex endpoints_mutex_;
    std::map<std::string, std::unique_ptr<EndpointFamilies>> endpoints_;

    // Engine step families (engine thread).
    core::Counter& steps_total_;
    core::Counter& failed_steps_total_;
    core::Histogram& step_seconds_;
    std::vector<core::Histogram*> layer_a2f_;  // per layer, registered at the layer's first crossing
    std::vector<core::Histogram*> layer_f2a_;

    // Stats families (render).
    std::mutex render_mutex_;
    std::function<attention::EngineLoopStats()> stats_source_;  // guarded by render_mutex_
    core::Gauge& running_;
    core::Gauge& waiting_;
    core::Gauge& kv_blocks_total_;
    core::Gauge& kv_blocks_used_;
    core::Gauge& kv_usage_;
    core::Counter& prompt_tokens_total_;
    core::Counter& generation_tokens_total_;
    core::Counter& preemptions_total_;
    attention::EngineLoopStats last_stats_;  // what the counters already hold (render_mutex_)
};

// The FFN ranks' part of render(), from each rank's /metrics text (nullopt: the rank did not answer): the
// afd_ffn_rank_up family, then every rank's afd_ffn_expert_tokens_total series with an ffn_rank label. Samples that
// are malformed, negative or without an expert label are left out. Exposed for tests.
std::string mergeFfnExpertMetrics(const std::vector<std::optional<std::string>>& rank_texts);

}  // namespace afd::serve
