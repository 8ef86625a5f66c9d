#include "lab/serve/serve_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "core/check.h"

namespace afd::lab {
namespace {

// The metric's title line and the name in its figures ("Mean TTFT (ms)").
struct MetricTitle {
    const char* heading;
    const char* label;
};

MetricTitle metricTitle(const std::string& metric) {
    if (metric == "ttft") return {"Time to First Token", "TTFT"};
    if (metric == "tpot") return {"Time per Output Token (excl. 1st token)", "TPOT"};
    if (metric == "itl") return {"Inter-token Latency", "ITL"};
    AFD_CHECK(metric == "e2el", "no latency metric {}", metric);
    return {"End-to-end Latency", "E2EL"};
}

std::string centered(const std::string& title, char fill) {
    constexpr size_t kWidth = 50;
    if (title.size() + 2 >= kWidth) return title;
    const size_t left = (kWidth - title.size()) / 2;
    return std::string(left, fill) + title + std::string(kWidth - left - title.size(), fill);
}

void line(std::string& out, const std::string& label, const std::string& value) {
    out += fmt::format("{:<40} {:<10}\n", label, value);
}

}  // namespace

std::string percentileName(double p) {
    if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
    return fmt::format("{}", p);
}

ServeSummary summarize(const LoadRunResult& run, const std::vector<double>& percentiles) {
    ServeSummary s;
    s.not_sent = run.not_sent;
    s.interrupted = run.interrupted;
    s.duration_s = run.duration_s;
    s.max_concurrency_seen = run.max_concurrency_seen;
    std::map<std::string, std::vector<double>> samples;
    for (const RequestRecord& r : run.records) {
        if (r.cancelled) {
            ++s.cancelled;
            continue;
        }
        if (!r.success) {
            if (s.failed++ == 0) s.first_error = r.error;
            continue;
        }
        ++s.completed;
        s.total_input_tokens += r.input_len;
        s.total_output_tokens += r.output_tokens;
        samples["ttft"].push_back(r.ttft_s * 1e3);
        samples["e2el"].push_back(r.e2e_s * 1e3);
        if (r.output_tokens > 1) {
            samples["tpot"].push_back((r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
        }
        for (const double itl : r.itl_s) samples["itl"].push_back(itl * 1e3);
    }
    if (s.duration_s > 0) {
        s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
        s.output_throughput = static_cast<double>(s.total_output_tokens) / s.duration_s;
        s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / s.duration_s;
    }
    for (const std::string& metric : kLatencyMetrics) {
        s.latency_ms[metric] = latencyStats(std::move(samples[metric]), percentiles);
    }
    return s;
}

std::string formatSummary(const ServeSummary& s, const std::vector<std::string>& metrics,
                          const std::vector<double>& percentiles) {
    std::string out = centered(" Serving Benchmark Result ", '=') + "\n";
    line(out, "Successful requests:", fmt::format("{}", s.completed));
    line(out, "Failed requests:", fmt::format("{}", s.failed));
    if (s.interrupted) {
        line(out, "Interrupted in flight:", fmt::format("{}", s.cancelled));
        line(out, "Not sent (interrupted):", fmt::format("{}", s.not_sent));
    }
    line(out, "Maximum request concurrency:", fmt::format("{}", s.max_concurrency_seen));
    line(out, "Benchmark duration (s):", fmt::format("{:.2f}", s.duration_s));
    line(out, "Total input tokens:", fmt::format("{}", s.total_input_tokens));
    line(out, "Total generated tokens:", fmt::format("{}", s.total_output_tokens));
    line(out, "Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
    line(out, "Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
    line(out, "Total token throughput (tok/s):", fmt::format("{:.2f}", s.total_token_throughput));
    for (const std::string& metric : metrics) {
        const MetricTitle title = metricTitle(metric);
        const LatencyStats& stats = s.latency_ms.at(metric);
        out += centered(title.heading, '-') + "\n";
        line(out, fmt::format("Mean {} (ms):", title.label), fmt::format("{:.2f}", stats.mean));
        line(out, fmt::format("Median {} (ms):", title.label), fmt::format("{:.2f}", stats.median));
        for (size_t i = 0; i < percentiles.size(); ++i) {
            line(out, fmt::format("P{} {} (ms):", percentileName(percentiles[i]), title.label),
                 fmt::format("{:.2f}", stats.percentiles[i]));
        }
    }
    out += std::string(50, '=') + "\n";
    if (s.failed > 0) out += fmt::format("First error ({} failed): {}\n", s.failed, s.first_error);
    return out;
}

std::string resultJson(const ServeRunInfo& info, const ServeSummary& s, const LoadRunResult& run,
                       const std::vector<double>& percentiles) {
    using nlohmann::json;
    json out;
    out["base_url"] = info.base_url;
    out["model"] = info.model;
    out["num_prompts"] = info.num_prompts;
    out["request_rate"] = std::isfinite(info.request_rate) ? json(info.request_rate) : json("inf");
    out["burstiness"] = info.burstiness;
    out["max_concurrency"] = info.max_concurrency > 0 ? json(info.max_concurrency) : json(nullptr);
    out["completed"] = s.completed;
    out["failed"] = s.failed;
    out["cancelled"] = s.cancelled;
    out["not_sent"] = s.not_sent;
    out["interrupted"] = s.interrupted;
    out["first_error"] = s.first_error;
    out["duration"] = s.duration_s;
    out["total_input_tokens"] = s.total_input_tokens;
    out["total_output_tokens"] = s.total_output_tokens;
    out["request_throughput"] = s.request_throughput;
    out["output_throughput"] = s.output_throughput;
    out["total_token_throughput"] = s.total_token_throughput;
    out["max_concurrency_seen"] = s.max_concurrency_seen;
    for (const auto& [metric, stats] : s.latency_ms) {
        out[fmt::format("mean_{}_ms", metric)] = stats.mean;
        out[fmt::format("median_{}_ms", metric)] = stats.median;
        out[fmt::format("std_{}_ms", metric)] = stats.stddev;
        for (size_t i = 0; i < percentiles.size(); ++i) {
            out[fmt::format("p{}_{}_ms", percentileName(percentiles[i]), metric)] = stats.percentiles[i];
        }
    }
    json records = json::array();
    for (const RequestRecord& r : run.records) {
        records.push_back(json{{"index", r.index},
                               {"success", r.success},
                               {"cancelled", r.cancelled},
                               {"error", r.error},
                               {"http_status", r.http_status},
                               {"input_len", r.input_len},
                               {"output_len", r.output_len},
                               {"output_tokens", r.output_tokens},
                               {"usage_reported", r.usage_reported},
                               {"send_s", r.send_s},
                               {"ttft_s", r.ttft_s},
                               {"e2e_s", r.e2e_s},
                               {"itl_s", r.itl_s}});
    }
    out["requests"] = std::move(records);
    return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace afd::lab
