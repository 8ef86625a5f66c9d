#include "core/metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/check.h"

namespace afd::core {
namespace {

bool isNameStart(char c, bool allow_colon) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}

bool isValidName(std::string_view name, bool allow_colon) {
    if (name.empty() || !isNameStart(name.front(), allow_colon)) return false;
    return std::all_of(name.begin(), name.end(),
                       [&](char c) { return isNameStart(c, allow_colon) || (c >= '0' && c <= '9'); });
}

// Escapes `\` and newline, plus `"` when `quote` (label values); help text keeps its quotes.
std::string escape(std::string_view text, bool quote) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '"' && quote) {
            out += "\\\"";
        } else {
            out += c;
        }
    }
    return out;
}

std::string formatValue(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", value);
}

// `{a="1"}` + le → `{a="1",le="0.5"}`.
std::string withLe(const std::string& labels_text, double bound) {
    const std::string le = fmt::format("le=\"{}\"", formatValue(bound));
    if (labels_text.empty()) return "{" + le + "}";
    return labels_text.substr(0, labels_text.size() - 1) + "," + le + "}";
}

}  // namespace

void Counter::inc(double amount) {
    AFD_CHECK(amount >= 0.0, "a counter cannot go down (inc by {})", amount);
    value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {
    for (size_t i = 0; i < upper_bounds_.size(); ++i) {
        AFD_CHECK(std::isfinite(upper_bounds_[i]), "histogram bucket bound {} is not finite", upper_bounds_[i]);
        AFD_CHECK(i == 0 || upper_bounds_[i - 1] < upper_bounds_[i],
                  "histogram bucket bounds must increase strictly ({} then {})", upper_bounds_[i - 1],
                  upper_bounds_[i]);
    }
}

void Histogram::observe(double value) {
    if (std::isnan(value)) return;
    const size_t bucket = static_cast<size_t>(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
                                              upper_bounds_.begin());
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
    Snapshot s;
    s.sum = sum_.load(std::memory_order_relaxed);
    s.cumulative.resize(upper_bounds_.size() + 1);
    uint64_t running = 0;
    for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
        running += counts_[i].load(std::memory_order_relaxed);
        s.cumulative[i] = running;
    }
    return s;
}

std::vector<double> exponentialBuckets(double start, double factor, int count) {
    AFD_CHECK(start > 0.0 && factor > 1.0 && count >= 0, "exponential buckets need start > 0, factor > 1, count >= 0");
    std::vector<double> bounds;
    double bound = start;
    for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
    return bounds;
}

struct MetricsRegistry::Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<std::string> label_names;  // sorted
    std::vector<double> upper_bounds;      // a histogram's bucket bounds
    // One entry per series, in registration order; exactly one of counter/gauge/histogram is set (by `type`).
    struct Series {
        std::string labels_text;  // `{a="1",b="2"}`, or empty without labels
        std::unique_ptr<Counter> counter;
        std::unique_ptr<Gauge> gauge;
        std::unique_ptr<Histogram> histogram;
    };
    std::vector<Series> series;
};

namespace {

std::string_view typeName(int type) {
    static constexpr std::string_view kNames[] = {"counter", "gauge", "histogram"};
    return kNames[type];
}

}  // namespace

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

std::pair<MetricsRegistry::Family*, size_t> MetricsRegistry::series(std::string_view name, std::string_view help,
                                                                    Type type, MetricLabels labels,
                                                                    const std::vector<double>* upper_bounds) {
    AFD_CHECK(isValidName(name, /*allow_colon=*/true), "invalid metric name '{}'", name);
    std::sort(labels.begin(), labels.end());
    std::vector<std::string> label_names;
    std::string labels_text;
    for (const auto& [label, value] : labels) {
        AFD_CHECK(isValidName(label, /*allow_colon=*/false) && label.rfind("__", 0) != 0,
                  "invalid label name '{}' on metric '{}'", label, name);
        AFD_CHECK(type != Type::kHistogram || label != "le", "label 'le' is reserved on histogram '{}'", name);
        AFD_CHECK(label_names.empty() || label_names.back() != label, "label '{}' repeated on metric '{}'", label,
                  name);
        label_names.push_back(label);
        labels_text += fmt::format("{}{}=\"{}\"", labels_text.empty() ? "{" : ",", label, escape(value, true));
    }
    if (!labels_text.empty()) labels_text += "}";

    auto family_it = std::find_if(families_.begin(), families_.end(), [&](const auto& f) { return f->name == name; });
    Family* family = nullptr;
    if (family_it == families_.end()) {
        auto created = std::make_unique<Family>();
        created->name = std::string(name);
        created->help = std::string(help);
        created->type = type;
        created->label_names = label_names;
        if (upper_bounds != nullptr) created->upper_bounds = *upper_bounds;
        family = families_.emplace_back(std::move(created)).get();
    } else {
        family = family_it->get();
        AFD_CHECK(family->type == type, "metric '{}' registered as both a {} and a {}", name,
                  typeName(static_cast<int>(family->type)), typeName(static_cast<int>(type)));
        AFD_CHECK(family->help == help, "metric '{}' registered with two help texts ('{}' and '{}')", name,
                  family->help, help);
        AFD_CHECK(family->label_names == label_names, "metric '{}' registered with label names [{}] and [{}]", name,
                  fmt::join(family->label_names, ","), fmt::join(label_names, ","));
        AFD_CHECK(upper_bounds == nullptr || family->upper_bounds == *upper_bounds,
                  "histogram '{}' registered with bucket bounds [{}] and [{}]", name,
                  fmt::join(family->upper_bounds, ","), fmt::join(*upper_bounds, ","));
    }
    for (size_t i = 0; i < family->series.size(); ++i) {
        if (family->series[i].labels_text == labels_text) return {family, i};
    }
    Family::Series& created = family->series.emplace_back();
    created.labels_text = std::move(labels_text);
    switch (type) {
        case Type::kCounter:
            created.counter = std::make_unique<Counter>();
            break;
        case Type::kGauge:
            created.gauge = std::make_unique<Gauge>();
            break;
        case Type::kHistogram:
            created.histogram = std::make_unique<Histogram>(family->upper_bounds);
            break;
    }
    return {family, family->series.size() - 1};
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, MetricLabels labels) {
    std::lock_guard lock(mutex_);
    auto [family, index] = series(name, help, Type::kCounter, std::move(labels));
    return *family->series[index].counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, MetricLabels labels) {
    std::lock_guard lock(mutex_);
    auto [family, index] = series(name, help, Type::kGauge, std::move(labels));
    return *family->series[index].gauge;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help, std::vector<double> upper_bounds,
                                      MetricLabels labels) {
    // Checked before the family exists, so that a bad first registration leaves nothing behind.
    const Histogram probe(upper_bounds);
    std::lock_guard lock(mutex_);
    auto [family, index] = series(name, help, Type::kHistogram, std::move(labels), &upper_bounds);
    return *family->series[index].histogram;
}

MetricsRegistry::CollectorHandle::CollectorHandle(CollectorHandle&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)), id_(std::exchange(other.id_, 0)) {}

MetricsRegistry::CollectorHandle& MetricsRegistry::CollectorHandle::operator=(CollectorHandle&& other) noexcept {
    if (this != &other) {
        reset();
        registry_ = std::exchange(other.registry_, nullptr);
        id_ = std::exchange(other.id_, 0);
    }
    return *this;
}

void MetricsRegistry::CollectorHandle::reset() {
    if (registry_ != nullptr) registry_->removeCollector(id_);
    registry_ = nullptr;
    id_ = 0;
}

MetricsRegistry::CollectorHandle MetricsRegistry::addCollector(std::function<void()> collect) {
    AFD_CHECK(collect != nullptr, "a metrics collector must be callable");
    std::lock_guard lock(collectors_mutex_);
    const uint64_t id = next_collector_id_++;
    collectors_.emplace_back(id, std::move(collect));
    return CollectorHandle(this, id);
}

void MetricsRegistry::removeCollector(uint64_t id) {
    std::lock_guard lock(collectors_mutex_);
    std::erase_if(collectors_, [&](const auto& entry) { return entry.first == id; });
}

std::string MetricsRegistry::render() const {
    {
        std::lock_guard lock(collectors_mutex_);
        for (const auto& [id, collect] : collectors_) collect();
    }
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& family : families_) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family->name, escape(family->help, false), family->name,
                           typeName(static_cast<int>(family->type)));
        for (const auto& series : family->series) {
            if (series.histogram) {
                const Histogram::Snapshot snap = series.histogram->snapshot();
                for (size_t i = 0; i < family->upper_bounds.size(); ++i) {
                    out += fmt::format("{}_bucket{} {}\n", family->name,
                                       withLe(series.labels_text, family->upper_bounds[i]), snap.cumulative[i]);
                }
                out += fmt::format("{}_bucket{} {}\n", family->name,
                                   withLe(series.labels_text, std::numeric_limits<double>::infinity()), snap.count());
                out += fmt::format("{}_sum{} {}\n", family->name, series.labels_text, formatValue(snap.sum));
                out += fmt::format("{}_count{} {}\n", family->name, series.labels_text, snap.count());
                continue;
            }
            const double value = series.counter ? series.counter->value() : series.gauge->value();
            out += fmt::format("{}{} {}\n", family->name, series.labels_text, formatValue(value));
        }
    }
    return out;
}

MetricsRegistry& globalMetrics() {
    static MetricsRegistry registry;
    return registry;
}

}  // namespace afd::core
