// The figures of an `afd bench serve` run, as `vllm bench serve` reports them: counts, duration, token totals and
// throughputs over the successful requests, and for each latency metric (ttft, tpot, itl, e2el) its mean, median,
// standard deviation and requested percentiles in milliseconds. TPOT of a request = (E2E − TTFT) / (output tokens
// − 1), for requests of more than one output token; the ITLs of every successful request form one sample.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lab/serve/latency_stats.h"
#include "lab/serve/load_run.h"

namespace afd::lab {

// The metric names --percentile-metrics takes, in report order.
inline const std::vector<std::string> kLatencyMetrics = {"ttft", "tpot", "itl", "e2el"};

struct ServeSummary {
    int64_t completed = 0;
    int64_t failed = 0;
    int64_t cancelled = 0;  // in flight when interrupted
    int64_t not_sent = 0;   // never sent because of an interrupt
    bool interrupted = false;
    std::string first_error;  // the message of the first failed request (by prompt index)
    double duration_s = 0;
    int64_t total_input_tokens = 0;   // of the successful requests
    int64_t total_output_tokens = 0;  // of the successful requests
    double request_throughput = 0;    // completed / duration
    double output_throughput = 0;     // output tokens / duration
    double total_token_throughput = 0;
    int64_t max_concurrency_seen = 0;
    std::map<std::string, LatencyStats> latency_ms;  // by metric name (every kLatencyMetrics entry)
};

// `percentiles` each in [0, 100] (AFD_CHECK).
ServeSummary summarize(const LoadRunResult& run, const std::vector<double>& percentiles);

// What the run was (the header of the report and the "config" of its JSON).
struct ServeRunInfo {
    std::string base_url;  // "http://127.0.0.1:8000/v1/completions"
    std::string model;
    int64_t num_prompts = 0;
    double request_rate = 0;
    double burstiness = 1;
    int64_t max_concurrency = 0;  // 0: none
};

// The summary block: counts and throughputs, then one section per metric of `metrics` (names of kLatencyMetrics)
// with mean, median and each percentile of `percentiles` (the order summarize() was given).
std::string formatSummary(const ServeSummary& summary, const std::vector<std::string>& metrics,
                          const std::vector<double>& percentiles);

// Everything as one JSON object: the run info, every figure of the summary (mean_ttft_ms, median_ttft_ms,
// std_ttft_ms, p99_ttft_ms, … as vLLM's result file names them) and one record per request sent.
std::string resultJson(const ServeRunInfo& info, const ServeSummary& summary, const LoadRunResult& run,
                       const std::vector<double>& percentiles);

// "99", "99.9": a percentile as it appears in names (p99_ttft_ms) and headers (P99).
std::string percentileName(double p);

}  // namespace afd::lab
