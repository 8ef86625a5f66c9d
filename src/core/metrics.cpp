#include "core/metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

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

}  // namespace

void Counter::inc(double amount) {
    AFD_CHECK(amount >= 0.0, "a counter cannot go down (inc by {})", amount);
    value_.fetch_add(amount, std::memory_order_relaxed);
}

struct MetricsRegistry::Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<std::string> label_names;  // sorted
    // One entry per series, in registration order; exactly one of counter/gauge is set (by `type`).
    struct Series {
        std::string labels_text;  // `{a="1",b="2"}`, or empty without labels
        std::unique_ptr<Counter> counter;
        std::unique_ptr<Gauge> gauge;
    };
    std::vector<Series> series;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

std::pair<MetricsRegistry::Family*, size_t> MetricsRegistry::series(std::string_view name, std::string_view help,
                                                                    Type type, MetricLabels labels) {
    AFD_CHECK(isValidName(name, /*allow_colon=*/true), "invalid metric name '{}'", name);
    std::sort(labels.begin(), labels.end());
    std::vector<std::string> label_names;
    std::string labels_text;
    for (const auto& [label, value] : labels) {
        AFD_CHECK(isValidName(label, /*allow_colon=*/false) && label.rfind("__", 0) != 0,
                  "invalid label name '{}' on metric '{}'", label, name);
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
        family = families_.emplace_back(std::move(created)).get();
    } else {
        family = family_it->get();
        AFD_CHECK(family->type == type, "metric '{}' registered as both a counter and a gauge", name);
        AFD_CHECK(family->help == help, "metric '{}' registered with two help texts ('{}' and '{}')", name,
                  family->help, help);
        AFD_CHECK(family->label_names == label_names, "metric '{}' registered with label names [{}] and [{}]", name,
                  fmt::join(family->label_names, ","), fmt::join(label_names, ","));
    }
    for (size_t i = 0; i < family->series.size(); ++i) {
        if (family->series[i].labels_text == labels_text) return {family, i};
    }
    Family::Series& created = family->series.emplace_back();
    created.labels_text = std::move(labels_text);
    if (type == Type::kCounter) {
        created.counter = std::make_unique<Counter>();
    } else {
        created.gauge = std::make_unique<Gauge>();
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

std::string MetricsRegistry::render() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& family : families_) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family->name, escape(family->help, false), family->name,
                           family->type == Type::kCounter ? "counter" : "gauge");
        for (const auto& series : family->series) {
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
