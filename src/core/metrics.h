// Process metrics: counters and gauges, optionally labelled, rendered in the Prometheus text exposition format
// (version 0.0.4) for a /metrics endpoint:
//
//   # HELP afd_ffn_layer_compute_seconds_total Time spent computing each layer.
//   # TYPE afd_ffn_layer_compute_seconds_total counter
//   afd_ffn_layer_compute_seconds_total{layer="3"} 0.25
//
// Threads: every method is thread-safe. Registration (counter(), gauge()) and render() take a lock; updates on
// the returned objects are single atomic operations and never lock, so hot loops register once at set-up and
// keep the reference.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace afd::core {

// Label name → value pairs. Order does not matter: series are identified by the sorted names.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (counts, accumulated seconds, bytes).
class Counter {
public:
    // Precondition: amount >= 0 (AFD_CHECK).
    void inc(double amount = 1.0);
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, bytes in use, a state as 0/1).
class Gauge {
public:
    void set(double value) { value_.store(value, std::memory_order_relaxed); }
    void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

class MetricsRegistry {
public:
    // The Content-Type of render()'s text.
    static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

    MetricsRegistry();
    ~MetricsRegistry();
    MetricsRegistry(const MetricsRegistry&) = delete;
    MetricsRegistry& operator=(const MetricsRegistry&) = delete;

    // The counter `name` with `labels`, created at 0 on first use; later calls with the same name and labels
    // return the same object, valid for the registry's lifetime. Names are code constants, so breaking a rule is
    // a bug (AFD_CHECK): name [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not starting with
    // "__" and not repeated; one name keeps one type, one help text and one set of label names.
    Counter& counter(std::string_view name, std::string_view help, MetricLabels labels = {});
    // The gauge `name` with `labels`; same rules as counter().
    Gauge& gauge(std::string_view name, std::string_view help, MetricLabels labels = {});

    // Every metric in registration order (families, then series within a family), each family as
    // `# HELP`, `# TYPE`, then one `name{label="value",…} value` line per series. Label values and help are
    // escaped as the format requires. Values print in the shortest form that reads back exactly ("3", "0.25",
    // "1e-07", "+Inf", "NaN").
    std::string render() const;

private:
    struct Family;
    enum class Type { kCounter, kGauge };

    // Finds or creates the family and the series; returns the series index in the family. Caller holds mutex_.
    std::pair<Family*, size_t> series(std::string_view name, std::string_view help, Type type, MetricLabels labels);

    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Family>> families_;
};

// The process-wide registry that /metrics renders.
MetricsRegistry& globalMetrics();

}  // namespace afd::core
