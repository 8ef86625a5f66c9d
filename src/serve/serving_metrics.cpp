#include "serve/serving_metrics.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "core/prometheus_text.h"
#include "http/http_client.h"

namespace afd::serve {
namespace {

using Clock = RequestRecord::Clock;

// Bucket bounds in seconds, after vLLM's, with finer low ends for the inter-token gaps of a fast decode.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2, 0.3,
                                         0.4,   0.5,    0.75,  1.0,    2.5,  5.0,   7.5,  10.0,  20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// A step, and one layer's A2F or F2A time within a step: 10 µs … about 5 s.
const std::vector<double> kStepBuckets = core::exponentialBuckets(1e-5, 2.0, 20);

// 1, 2, 5, 10, 20, 50 … up to 10^6 tokens.
std::vector<double> tokenBuckets() {
    std::vector<double> bounds;
    for (double decade = 1; decade <= 1e6; decade *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            if (m * decade <= 1e6) bounds.push_back(m * decade);
        }
    }
    return bounds;
}

constexpr std::array<RequestEnd, 5> kEnds = {RequestEnd::kStop, RequestEnd::kLength, RequestEnd::kAborted,
                                             RequestEnd::kError, RequestEnd::kRejected};

const char* endName(RequestEnd end) {
    switch (end) {
        case RequestEnd::kStop:
            return "stop";
        case RequestEnd::kLength:
            return "length";
        case RequestEnd::kAborted:
            return "aborted";
        case RequestEnd::kError:
            return "error";
        case RequestEnd::kRejected:
            return "rejected";
    }
    return "error";
}

double secondsBetween(Clock::time_point from, Clock::time_point to) {
    return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

constexpr const char* kExpertTokens = "afd_ffn_expert_tokens_total";

}  // namespace

struct ServingMetrics::EndpointFamilies {
    core::Histogram* ttft = nullptr;
    core::Histogram* itl = nullptr;
    core::Histogram* e2e = nullptr;
    core::Histogram* prompt_tokens = nullptr;
    core::Histogram* generation_tokens = nullptr;
    std::array<core::Counter*, kEnds.size()> finished{};  // by RequestEnd
    std::array<core::Counter*, 2> success{};              // stop, length
};

ServingMetrics::ServingMetrics(ServingMetricsOptions options)
    : options_(std::move(options)),
      steps_total_(registry_.counter("afd_engine_steps_total", "Engine steps that computed tokens.")),
      failed_steps_total_(registry_.counter("afd_engine_failed_steps_total",
                                            "Engine steps that failed (their requests ended with the error).")),
      step_seconds_(registry_.histogram("afd_engine_step_seconds", "Wall time of one engine step.", kStepBuckets)),
      running_(registry_.gauge("afd_num_requests_running", "Requests in the engine's running batch.")),
      waiting_(registry_.gauge("afd_num_requests_waiting", "Requests submitted and not yet running.")),
      kv_blocks_total_(registry_.gauge("afd_kv_blocks_total", "KV cache blocks of the engine.")),
      kv_blocks_used_(registry_.gauge("afd_kv_blocks_used", "KV cache blocks held by requests.")),
      kv_usage_(registry_.gauge("afd_kv_cache_usage_perc", "Fraction of the KV cache blocks in use (1 = all).")),
      prompt_tokens_total_(registry_.counter("afd_prompt_tokens_total", "Prompt tokens the engine took.")),
      generation_tokens_total_(registry_.counter("afd_generation_tokens_total", "Tokens the engine generated.")),
      preemptions_total_(
          registry_.counter("afd_num_preemptions_total", "Requests preempted (their KV blocks taken back).")) {
    // The endpoints the API server serves, so that their series exist from the start.
    endpoint("completions");
    endpoint("chat_completions");
}

ServingMetrics::~ServingMetrics() = default;

ServingMetrics::EndpointFamilies& ServingMetrics::endpoint(const std::string& name) {
    std::lock_guard lock(endpoints_mutex_);
    auto& slot = endpoints_[name];
    if (slot) return *slot;
    slot = std::make_unique<EndpointFamilies>();
    EndpointFamilies& f = *slot;
    const core::MetricLabels labels = {{"endpoint", name}};
    f.ttft = &registry_.histogram("afd_time_to_first_token_seconds",
                                  "Time from a request's arrival to its first token.", kTtftBuckets, labels);
    f.itl = &registry_.histogram("afd_inter_token_latency_seconds",
                                 "Time between consecutive output tokens of a request.", kItlBuckets, labels);
    f.e2e = &registry_.histogram("afd_e2e_request_latency_seconds",
                                 "Time from a request's arrival to its complete reply.", kE2eBuckets, labels);
    f.prompt_tokens =
        &registry_.histogram("afd_request_prompt_tokens", "Prompt tokens of a request.", tokenBuckets(), labels);
    f.generation_tokens = &registry_.histogram("afd_request_generation_tokens", "Tokens generated for a request.",
                                               tokenBuckets(), labels);
    for (size_t i = 0; i < kEnds.size(); ++i) {
        f.finished[i] = &registry_.counter("afd_request_finished_total", "Requests ended, by how they ended.",
                                           {{"endpoint", name}, {"finished_reason", endName(kEnds[i])}});
    }
    for (size_t i = 0; i < f.success.size(); ++i) {
        f.success[i] = &registry_.counter("afd_request_success_total", "Requests that ended with stop or length.",
                                          {{"endpoint", name}, {"finished_reason", endName(kEnds[i])}});
    }
    return f;
}

void ServingMetrics::setStatsSource(std::function<attention::EngineLoopStats()> source) {
    std::lock_guard lock(render_mutex_);
    stats_source_ = std::move(source);
}

void ServingMetrics::onRequestDone(const RequestRecord& record) {
    EndpointFamilies& f = endpoint(record.endpoint);
    const auto index = static_cast<size_t>(std::find(kEnds.begin(), kEnds.end(), record.end) - kEnds.begin());
    if (index < kEnds.size()) f.finished[index]->inc();
    if (index < f.success.size()) f.success[index]->inc();
    if (record.end == RequestEnd::kRejected) return;
    f.e2e->observe(secondsBetween(record.arrival, record.finished));
    f.prompt_tokens->observe(static_cast<double>(std::max<int64_t>(record.num_prompt_tokens, 0)));
    f.generation_tokens->observe(static_cast<double>(std::max<int64_t>(record.num_output_tokens, 0)));
    if (record.outputs.empty()) return;
    f.ttft->observe(secondsBetween(record.arrival, record.outputs.front().first));
    for (size_t i = 1; i < record.outputs.size(); ++i) {
        const auto& [time, tokens] = record.outputs[i];
        if (tokens <= 0) continue;
        const double gap = secondsBetween(record.outputs[i - 1].first, time) / static_cast<double>(tokens);
        for (int64_t t = 0; t < tokens; ++t) f.itl->observe(gap);
    }
}

void ServingMetrics::onStep(const attention::StepReport& report, const attention::Engine& engine) {
    onStep(report, engine.backend().stepLayerTimings());
}

void ServingMetrics::onStep(const attention::StepReport& report,
                            std::span<const attention::MlpBackend::LayerTiming> layers) {
    if (!report.error.isOk()) {
        failed_steps_total_.inc();
        return;  // a failed step's layer figures are partial
    }
    if (report.num_tokens <= 0) return;
    steps_total_.inc();
    step_seconds_.observe(report.seconds);
    if (layer_a2f_.size() < layers.size()) {
        layer_a2f_.resize(layers.size(), nullptr);
        layer_f2a_.resize(layers.size(), nullptr);
    }
    for (size_t l = 0; l < layers.size(); ++l) {
        const auto& t = layers[l];
        if (t.num_crossings == 0) continue;
        if (layer_a2f_[l] == nullptr) {
            const core::MetricLabels labels = {{"layer", std::to_string(l)}};
            layer_a2f_[l] = &registry_.histogram(
                "afd_layer_a2f_seconds", "Per step, time sending a layer's rows to the FFN ranks (attention side).",
                kStepBuckets, labels);
            layer_f2a_[l] = &registry_.histogram(
                "afd_layer_f2a_seconds",
                "Per step, time waiting for and taking in a layer's results from the FFN ranks (attention side).",
                kStepBuckets, labels);
        }
        layer_a2f_[l]->observe(t.send_seconds);
        layer_f2a_[l]->observe(t.receive_seconds);
    }
}

void ServingMetrics::refreshStats() {
    if (!stats_source_) return;
    const attention::EngineLoopStats s = stats_source_();
    running_.set(static_cast<double>(s.num_running));
    waiting_.set(static_cast<double>(s.num_waiting));
    kv_blocks_total_.set(static_cast<double>(s.num_kv_blocks));
    const int64_t used = std::max<int64_t>(0, s.num_kv_blocks - s.num_free_kv_blocks);
    kv_blocks_used_.set(static_cast<double>(used));
    kv_usage_.set(s.num_kv_blocks > 0 ? static_cast<double>(used) / static_cast<double>(s.num_kv_blocks) : 0.0);
    // The stats are totals; the counters take what is new since the last render (a source that went back, a new
    // engine, adds nothing until it passes the old total).
    auto advance = [](core::Counter& counter, auto now, auto& seen) {
        if (now > seen) counter.inc(static_cast<double>(now - seen));
        seen = std::max(seen, now);
    };
    advance(prompt_tokens_total_, s.prompt_tokens, last_stats_.prompt_tokens);
    advance(generation_tokens_total_, s.generation_tokens, last_stats_.generation_tokens);
    advance(preemptions_total_, s.num_preemptions, last_stats_.num_preemptions);
}

std::string ServingMetrics::render() {
    std::lock_guard lock(render_mutex_);
    refreshStats();
    return registry_.render() + renderFfnRanks();
}

std::string ServingMetrics::renderFfnRanks() const {
    const size_t n = options_.ffn_admin_ports.size();
    if (n == 0) return {};
    std::vector<std::optional<std::string>> texts(n);
    auto fetch = [&](size_t rank) {
        http::HttpClientOptions client_options;
        client_options.connect_timeout = options_.ffn_timeout;
        client_options.timeout = options_.ffn_timeout;
        client_options.max_body_bytes = size_t{8} << 20;
        http::HttpClient client(options_.ffn_admin_host, options_.ffn_admin_ports[rank], client_options);
        auto reply = client.get("/metrics");
        if (reply.isOk() && reply->status == 200) texts[rank] = std::move(reply->body);
    };
    if (n == 1) {
        fetch(0);
    } else {
        std::vector<std::jthread> fetchers;
        fetchers.reserve(n);
        for (size_t rank = 0; rank < n; ++rank) fetchers.emplace_back(fetch, rank);
    }
    return mergeFfnExpertMetrics(texts);
}

std::string mergeFfnExpertMetrics(const std::vector<std::optional<std::string>>& rank_texts) {
    if (rank_texts.empty()) return {};
    core::MetricsRegistry merged;
    for (size_t rank = 0; rank < rank_texts.size(); ++rank) {
        merged
            .gauge("afd_ffn_rank_up", "Whether the FFN rank answered its /metrics (1) or not (0).",
                   {{"ffn_rank", std::to_string(rank)}})
            .set(rank_texts[rank].has_value() ? 1.0 : 0.0);
    }
    for (size_t rank = 0; rank < rank_texts.size(); ++rank) {
        if (!rank_texts[rank].has_value()) continue;
        const core::PrometheusText text = core::PrometheusText::parse(*rank_texts[rank]);
        for (const core::PrometheusSample& sample : text.series(kExpertTokens)) {
            const std::string expert = sample.label("expert");
            if (expert.empty() || !(sample.value >= 0.0) || std::isinf(sample.value)) continue;
            merged
                .counter(kExpertTokens, "Tokens routed to each expert of an FFN rank (summed over layers).",
                         {{"expert", expert}, {"ffn_rank", std::to_string(rank)}})
                .inc(sample.value);
        }
    }
    return merged.render();
}

}  // namespace afd::serve
