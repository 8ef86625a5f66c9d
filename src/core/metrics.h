// Process metrics: counters, gauges and histograms, optionally labelled, rendered in the Prometheus text exposition
// format (version 0.0.4) for a /metrics endpoint:
//
//   # HELP afd_ffn_layer_compute_seconds_total Time spent computing each layer.
//   # TYPE afd_ffn_layer_compute_seconds_total counter
//   afd_ffn_layer_compute_seconds_total{layer="3"} 0.25
//
// Threads: every method is thread-safe. Registration (counter(), gauge(), histogram()) and render() take a lock;
// updates on the returned objects are atomic operations and never lock, so hot loops register once at set-up and
// keep the reference. Values that are costly to keep current (a device's counters) can be refreshed by a collector
// that render() runs first (addCollector).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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

// A distribution over fixed buckets (upper bounds, strictly increasing and finite, plus the implicit +Inf):
// observe(v) counts v in the first bucket whose bound is >= v and adds v to the sum. Rendered as cumulative
// `_bucket{le="…"}` lines, `_sum` and `_count`.
class Histogram {
public:
    // Precondition (AFD_CHECK): `upper_bounds` strictly increasing and finite (it may be empty: +Inf only).
    explicit Histogram(std::vector<double> upper_bounds);
    Histogram(const Histogram&) = delete;
    Histogram& operator=(const Histogram&) = delete;

    // Lock-free: a binary search and two atomic adds. NaN is not counted.
    void observe(double value);

    struct Snapshot {
        std::vector<uint64_t> cumulative;  // [upper_bounds.size() + 1]: observations <= each bound, then all (+Inf)
        double sum = 0.0;
        uint64_t count() const { return cumulative.empty() ? 0 : cumulative.back(); }
    };
    // The counts read bucket by bucket (each one exact; while observe() runs, the sum may include an observation
    // whose bucket was read before it was counted). count() always equals the +Inf bucket.
    Snapshot snapshot() const;
    const std::vector<double>& upperBounds() const { return upper_bounds_; }

private:
    const std::vector<double> upper_bounds_;
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket (not cumulative), +Inf last
    std::atomic<double> sum_{0.0};
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the one before (factor > 1, start > 0).
std::vector<double> exponentialBuckets(double start, double factor, int count);

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
    // The histogram `name` with `labels` and bucket bounds `upper_bounds` (see Histogram); same rules as counter(),
    // and one name keeps one set of bounds; the label name "le" is reserved.
    Histogram& histogram(std::string_view name, std::string_view help, std::vector<double> upper_bounds,
                         MetricLabels labels = {});

    // Registers `collect`, which render() calls (on the rendering thread, before it reads any value) to refresh
    // values kept elsewhere: it sets gauges, adds to counters and may register series. It must be cheap, must not
    // throw and must not call render(). The collector stays until the returned handle is destroyed or reset();
    // destroying the handle waits for a render() running it to finish with it.
    class CollectorHandle {
    public:
        CollectorHandle() = default;
        CollectorHandle(MetricsRegistry* registry, uint64_t id) : registry_(registry), id_(id) {}
        CollectorHandle(CollectorHandle&& other) noexcept;
        CollectorHandle& operator=(CollectorHandle&& other) noexcept;
        ~CollectorHandle() { reset(); }
        void reset();

    private:
        MetricsRegistry* registry_ = nullptr;
        uint64_t id_ = 0;
    };
    [[nodiscard]] CollectorHandle addCollector(std::function<void()> collect);

    // Runs the collectors, then renders every metric in registration order (families, then series within a family),
    // each family as `# HELP`, `# TYPE`, then one `name{label="value",…} value` line per series (a histogram's
    // series: its `_bucket` lines, `_sum`, `_count`). Label values and help are
    // escaped as the format requires. Values print in the shortest form that reads back exactly ("3", "0.25",
    // "1e-07", "+Inf", "NaN").
    std::string render() const;

private:
    struct Family;
    enum class Type { kCounter, kGauge, kHistogram };

    // Finds or creates the family and the series; returns the series index in the family. Caller holds mutex_.
    // `upper_bounds`: a histogram's (ignored for the other types).
    std::pair<Family*, size_t> series(std::string_view name, std::string_view help, Type type, MetricLabels labels,
                                      const std::vector<double>* upper_bounds = nullptr);
    void removeCollector(uint64_t id);

    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Family>> families_;
    // Held while collectors run (render) and while one is added or removed; taken before mutex_, never after.
    mutable std::mutex collectors_mutex_;
    std::vector<std::pair<uint64_t, std::function<void()>>> collectors_;
    uint64_t next_collector_id_ = 1;
};

// The process-wide registry that /metrics renders.
MetricsRegistry& globalMetrics();

}  // namespace afd::core
